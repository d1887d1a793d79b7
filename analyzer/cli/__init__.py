"""The `analyzer` command line (console script `analyzer = "analyzer.cli:main"`): app.py assembles
the commands, grouped by what they read (check.py, cost.py, numerics.py, compare.py, export.py),
common.py holds what they share. Commands parse, call the library, render."""

from analyzer.cli.app import app, main

__all__ = ["app", "main"]
