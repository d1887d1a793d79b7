"""`tracer`: record a program's comm pattern per simulated rank. The app: its commands
(record.py, merge.py, replay.py, golden.py; what they share is common.py) and main.

Exit codes: 0 recorded, 2 bad input or a program that failed on some rank (the ranks that did
record keep their events in the trace).
"""

from __future__ import annotations

import signal
import sys

import typer

from tracer.cli import golden, merge, record, replay
from tracer.record.result import Interrupted

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Record every collective, DeviceMesh op and DTensor redistribution of a "
    "torch.distributed program, per simulated rank, without a cluster.",
)


app.add_typer(golden.golden_app, name="golden")
app.command()(replay.replay)
app.command(context_settings=record.CONTEXT)(record.record)
app.command()(merge.merge)


@app.callback()
def _root() -> None:
    """commtrace recorder."""


def _terminated(signum, frame) -> None:
    raise Interrupted(signum)


def main() -> None:
    from traceformat.output import QuietPipe

    signal.signal(signal.SIGTERM, _terminated)  # unwind like Ctrl-C: the ranks are killed, the parts kept
    if sys.stdout is not None:  # `tracer golden update | head -1`: the command's own status, quietly
        sys.stdout = QuietPipe(sys.stdout)
    try:
        app()
    except KeyboardInterrupt as e:
        sys.exit(128 + getattr(e, "signum", signal.SIGINT))
