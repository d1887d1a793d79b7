"""What the `analyzer` commands share: one-line errors (exit 2), rendering (one module per output
format), loading a trace, and checking and writing an output file."""

from __future__ import annotations

import contextlib

import typer


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _render(json_out: bool, name: str, *args) -> None:
    """One renderer module per output format; both have a function per command."""
    if json_out:
        from analyzer.render import json as render_json

        getattr(render_json, name)(*args)
    else:
        from rich.console import Console

        from analyzer.render import console

        getattr(console, name)(Console(), *args)


def _load(path: str, **options):
    """The trace at `path`; exit 2 with one line when it cannot be read or holds no event at all
    (an empty recording is bad input, not a clean run). `options` go to the source (fr: how
    Flight Recorder dumps are read)."""
    from analyzer.loader import LoadError, load

    fr = options.get("fr")
    try:
        if fr is not None and fr.ray is not None:  # dumps read where they are: a Ray cluster
            from analyzer.sources.flight_recorder import on_ray

            t = on_ray.load_path(path, fr)
        else:
            t = load(path, **options)
    except LoadError as e:
        _fail(str(e))
    if t.n_events == 0:
        why = [n for n in t.notes if n.startswith(("rank", "missing"))]
        _fail(f"{path}: no events at all, nothing to analyse" + (f" ({'; '.join(why)})" if why else ""))
    return t


def _output(path: str, *inputs: str | None, what: str = "-o") -> None:
    """Refuse (one line, exit 2) an output that is one of the inputs or cannot be written (a real
    try: /proc and some mounts pass access() yet refuse new files), before the (maybe long)
    load: the file stays untouched."""
    from traceformat.output import OutputError, probe, refuse_inputs

    try:
        refuse_inputs(path, inputs, what)
        probe(path, what)
    except OutputError as e:
        _fail(str(e))


@contextlib.contextmanager
def _write(path: str, mode: str = "w", what: str = "-o"):
    """An open temp file that replaces `path` once written (a device or FIFO is written in place,
    never renamed over): a failed or interrupted command leaves no half-written file (checked
    writable by _output first). An OSError writing it (no space, read-only, a folder it cannot
    create files in) is one line, exit 2."""
    from traceformat.output import atomic_open, cannot_write

    try:
        with atomic_open(path, mode) as f:
            yield f
    except OSError as e:
        _fail(str(cannot_write(path, e, what)))


def fr_options(jobs: int | None, ray: str | None, frontier: bool = False):
    """How Flight Recorder dumps are read (other inputs ignore it); exit 2 on a bad -j."""
    from analyzer.sources.flight_recorder.options import ReadOptions

    if jobs is not None and jobs < 1:
        _fail(f"-j {jobs}: needs at least 1 process")
    return ReadOptions(frontier=frontier, jobs=jobs, ray=ray)
