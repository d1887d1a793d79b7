"""`python -m analyzer.cli`: the `analyzer` command."""

from analyzer.cli.app import main

if __name__ == "__main__":
    main()
