"""`python -m tracer`: the `tracer` command."""

from tracer.cli.app import main

if __name__ == "__main__":
    main()
