"""`tracer merge`: join per-rank parts and shards into one trace."""

from __future__ import annotations

import typer

from tracer.cli.common import fail


def merge(
    inputs: list[str] = typer.Argument(
        ...,
        metavar="PARTS...",
        help="Folders of rank_*.part files (OUT.trace.parts), .part files, or partial .trace files (shards).",
    ),
    out: str = typer.Option(..., "--out", "-o", help="Output .trace."),
) -> None:
    """Join per-rank parts and shards (of an interrupted or sharded recording) into one trace."""
    from traceformat import format as fmt
    from traceformat import parts as trace_parts
    from traceformat.output import cannot_write, probe, refuse_inputs
    from tracer.record.merge import collect_parts

    try:
        refuse_inputs(out, inputs)
        probe(out)
        files = collect_parts(inputs)
        refuse_inputs(out, files)
        summary = trace_parts.merge(files, out)
    except (ValueError, fmt.TraceFormatError) as e:
        fail(str(e))
    except OSError as e:  # no space, a read-only mount: the old file stays (written atomically)
        fail(str(cannot_write(out, e)))
    for note in summary.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"merged {len(files)} parts ({len(summary.header['ranks'])} ranks) -> {out}", err=True)
