"""`tracer replay TRACE`: re-issue a recorded comm pattern on a real backend (tracer/replay/),
then print time and bandwidth per op and group, or the hang analysis of the replay's own trace."""

from __future__ import annotations

import os

import typer

from tracer.cli.common import analyzer, fail


def replay(
    trace: str = typer.Argument(..., help="A recorded .trace to play back."),
    backend: str = typer.Option("gloo", "--backend", help="Real backend to replay on (gloo: CPU)."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds before the replay counts as hung and is killed."),
    steps: int = typer.Option(None, "--steps", help="Replay only events of the first K optimizer steps."),
    out: str = typer.Option(None, "--out", "-o", help="The replay's own trace (default: TRACE.replay.trace)."),
    prefix: bool = typer.Option(
        False, "--prefix", help="Replay a partial trace (missing ranks, truncated streams) up to its common prefix."
    ),
) -> None:
    """Re-issue a recorded comm pattern on a real backend, no model. Exit 0 completed (prints time
    and bandwidth per op and group), 1 hung or failed (prints the hang analysis), 2 bad input."""
    from traceformat import format as fmt
    from traceformat.output import cannot_write, probe, refuse_inputs
    from tracer.replay.driver import ReplayError
    from tracer.replay.driver import replay as run_replay

    out = out or os.path.splitext(trace)[0] + ".replay.trace"
    try:
        if not timeout > 0:
            raise ValueError(f"--timeout must be a positive number of seconds, got {timeout:g}")
        if steps is not None and steps < 1:
            raise ValueError(f"--steps must be at least 1, got {steps}")
        refuse_inputs(out, [trace])
        probe(out)
        result = run_replay(trace, out=out, timeout=timeout, steps=steps, prefix=prefix, backend=backend)
    except (ValueError, ReplayError, fmt.TraceFormatError) as e:
        fail(str(e))
    except OSError as e:  # its parts folder or its trace could not be written
        fail(str(cannot_write(out, e)))
    from rich.console import Console

    if result.hung or result.errors:
        what = f"hung: killed after {timeout:g} s" if result.hung else "failed"
        typer.echo(f"replay {what} -> {out}", err=True)
        for line in list(result.errors.values())[:4]:
            typer.echo(f"  {line}", err=True)
        analyzer("hang", out)  # the hang analysis of the replay's own trace (exit 1: it hung)
        raise typer.Exit(1)
    _replay_table(Console(), result)


def _replay_table(console, result) -> None:
    from rich.table import Table

    table = Table(title=f"replay on gloo: {result.seconds:.1f} s -> {result.out}")
    for col in ("op", "group", "calls", "time (s)", "bytes", "algbw"):
        # names and sizes are never cut or wrapped, whatever the terminal's width
        table.add_column(col, justify="left" if col in ("op", "group") else "right", no_wrap=col != "time (s)")
    for s in result.stats:
        table.add_row(s["op"], s["group"], str(s["calls"]), f"{s['seconds']:.4f}", f"{s['bytes']:,}", _rate(s["algbw"]))
    console.print(table)


def _rate(bps: float) -> str:
    for unit in ("B/s", "KB/s", "MB/s", "GB/s"):
        if bps < 1000 or unit == "GB/s":
            return f"{bps:.1f} {unit}"
        bps /= 1000
    return ""
