"""`analyzer`: parse, call the library, render. Exit 0 clean, 1 findings, 2 bad input. The app:
its commands (check.py, cost.py, numerics.py, compare.py, export.py; what they share is
common.py) and main. Every command imports its library lazily: `analyzer --help` loads no polars."""

from __future__ import annotations

import sys

import typer

from analyzer.cli import check, compare, cost, export, numerics

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Analyze commtrace traces (and Flight Recorder dumps): summary, checks, hangs, "
    "diffs, an HTML report, exports (Perfetto, parquet, JSON).",
)

# The order of `analyzer --help`.
app.command()(check.summary)
app.command()(cost.cost)
app.command()(check.check)
app.command()(cost.lint)
app.command()(numerics.numerics)
app.command()(check.hang)
app.command()(compare.diff)
app.command()(export.export)
app.command()(export.report)
app.add_typer(compare.golden_app, name="golden")


@app.callback()
def _root() -> None:
    """commtrace analyzer."""


def main() -> None:
    from traceformat.output import QuietPipe

    if sys.stdout is not None:
        sys.stdout = QuietPipe(sys.stdout)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
