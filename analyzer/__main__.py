"""`python -m analyzer ...`: the analyzer CLI (how the recorder runs it without importing it)."""

from analyzer.cli import main

main()
