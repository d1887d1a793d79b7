"""The `tracer` command line (console script `tracer = "tracer.cli:main"`): app.py assembles the
commands, one module each (record.py, merge.py, replay.py, golden.py), common.py holds what
they share. Commands parse, call the library (tracer/record, tracer/replay), report."""

from tracer.cli.app import app, main

__all__ = ["app", "main"]
