"""What the `tracer` commands share: one-line errors (exit 2), notes, recording a request and
reporting it, and running the torch-free analyzer's CLI."""

from __future__ import annotations

import statistics
import subprocess
import sys
from typing import TYPE_CHECKING, NoReturn

import typer

from tracer.record.result import Interrupted

if TYPE_CHECKING:
    from tracer.record.request import RecordRequest
    from tracer.record.result import RecordResult


def fail(msg: str) -> NoReturn:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def note(msg: str) -> None:
    typer.echo(f"note: {msg}", err=True)


def record(request: RecordRequest) -> None:
    """Record `request` and report it: bad options are one line and exit 2, an interruption
    exits 128 + its signal."""
    from tracer.record.pipeline import record as run  # the executors, the trace format: when recording

    try:
        result = run(request)
    except ValueError as e:  # bad options, an output that is an input, no torch, no Ray cluster...
        fail(str(e))
    except Interrupted as e:
        typer.echo(e.message, err=True)
        raise typer.Exit(128 + e.signum) from None
    report(result)


def report(result: RecordResult) -> None:
    """The verdict first (the failed ranks, first real error first: record/result.py's
    failure_lines), then where the trace went; exit 2 when a rank failed."""
    from tracer.record.result import failure_lines

    for line in result.notes:
        note(line)
    n = sum(result.n_events.values())
    if not result.written:
        typer.echo(f"error: no rank recorded anything; {result.out} not written", err=True)
        for line in failure_lines(result.failures)[:1]:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2)
    for line in failure_lines(result.failures):
        typer.echo(f"error: {line}", err=True)
    what = "partial trace:" if result.errors else "recorded"
    kept = f" ({result.out} left as it was)" if result.path != result.out else ""
    typer.echo(
        f"{what} {n} events on {len(result.ranks)} ranks in {result.seconds:.1f} s -> {result.path}{kept}", err=True
    )
    if result.peak_rss:
        typer.echo(peaks(result.peak_rss), err=True)
    if result.errors:
        raise typer.Exit(2)


def peaks(peak_rss: dict[int, int]) -> str:
    """'peak memory per recording process: max 0.41 GiB (rank 3), median 0.38 GiB over 64'."""
    top = max(peak_rss, key=peak_rss.__getitem__)
    gib = 1 << 30
    return (
        f"peak memory per recording process: max {peak_rss[top] / gib:.2f} GiB (rank {top}), "
        f"median {statistics.median(peak_rss.values()) / gib:.2f} GiB over {len(peak_rss)}"
    )


def analyzer(*args: str) -> int:
    """Run the torch-free analyzer's CLI on what was recorded: a subprocess, so that the recorder
    imports nothing from the analyzer. Its output goes straight to ours; returns its exit code."""
    sys.stdout.flush()
    return subprocess.run([sys.executable, "-m", "analyzer", *args]).returncode
