"""`analyzer export` and `analyzer report`: write the trace for other tools, or as one HTML page."""

from __future__ import annotations

import typer

from analyzer.cli.common import _fail, _load, _output, _write

EXPORT_FORMATS = ("perfetto", "parquet", "json")


def export(
    trace: str = typer.Argument(..., help="A trace, a folder of parts or of Flight Recorder dumps."),
    output: str = typer.Option(..., "-o", "--output", help="File to write."),
    fmt: str = typer.Option(
        "perfetto",
        "--format",
        help="perfetto: a timeline for ui.perfetto.dev (Chrome "
        "trace JSON); parquet: the events frame, plus OUT.groups.parquet; json: both "
        "frames in one JSON object.",
    ),
    time: str = typer.Option(
        "auto",
        "--time",
        help="perfetto: auto (real timestamps of post-mortem traces, "
        "logical time of dry runs), logical (1 us = one event) or real.",
    ),
    ranks: str = typer.Option(
        "all",
        "--ranks",
        help="Only these ranks, e.g. 0-7,64 (a timeline of thousands of ranks is more than a browser opens).",
    ),
) -> None:
    """Write the trace for other tools: a Perfetto timeline (a process per rank, a track per
    process group, p2p as flow arrows) or its frames as parquet / JSON. Exit 0 written, 2 bad input."""
    if fmt not in EXPORT_FORMATS:
        _fail(f"--format {fmt!r}: expected one of {', '.join(EXPORT_FORMATS)}")
    if time not in ("auto", "logical", "real"):
        _fail(f"--time {time!r}: expected auto, logical or real")
    _output(output, trace)
    t = _load(trace)
    if ranks != "all":
        from traceformat.ranks import parse_ranks

        try:
            t = t.subset(parse_ranks(ranks, t.world_size))
        except ValueError as e:
            _fail(str(e))
    if fmt == "perfetto":
        from analyzer.render.perfetto import write_perfetto

        with _write(output) as f:
            n = write_perfetto(t, f, time)
        typer.echo(
            f"wrote {output}: {n['slices']} slices on {n['tracks']} tracks, {n['flows']} p2p flows, "
            f"{'real' if n['real_time'] else 'logical'} time; open it in https://ui.perfetto.dev"
        )
    elif fmt == "parquet":
        from analyzer.render.frames import groups_path, write_parquet

        _output(groups_path(output), trace, output)
        with _write(output, "wb") as events_out, _write(groups_path(output), "wb") as groups_out:
            write_parquet(t, events_out, groups_out)
        typer.echo(f"wrote {output} ({t.events.height} events) and {groups_path(output)} ({t.groups.height} groups)")
    else:
        from analyzer.render.frames import write_json

        with _write(output) as f:
            write_json(t, f)
        typer.echo(f"wrote {output} ({t.events.height} events, {t.groups.height} groups)")


def report(
    trace: str = typer.Argument(..., help="A trace, a folder of parts or of Flight Recorder dumps."),
    output: str = typer.Option("report.html", "-o", "--output", help="HTML file to write."),
    diff_with: str = typer.Option(
        None, "--diff", help="Trace B: add `analyzer diff`'s tables and a plot of volume in A and B."
    ),
    expected: str = typer.Option(
        None, "--expected", help="Golden trace of the same config: say what each stalled rank should have run next."
    ),
    eager_bytes: int = typer.Option(0, "--eager-bytes", help="As for `analyzer hang`."),
    cluster: str = typer.Option(
        "h100-dgx",
        "--cluster",
        help="Price the communication on this cluster (as `analyzer cost`); 'none': no time plot.",
    ),
    ranks_per_node: int | None = typer.Option(None, "--ranks-per-node", help="As for `analyzer cost`."),
    ref: str = typer.Option(
        None, "--ref", help="Numerics reference (a trace recorded with --numerics): as `analyzer numerics --ref`."
    ),
) -> None:
    """One self-contained HTML page (no network needed): summary, findings with their frames, the
    wait-for graph of a hang or deadlock, volume plots per mesh dim x op x phase and per step, the
    time per step on --cluster next to them, lint's advice, numerics (on a trace recorded with
    --numerics; against --ref where given), and with --diff the divergence and volume tables.
    Exit 0 once written (a picture, not a check: gate CI on `analyzer check`), 2 bad input."""
    from analyzer.cost.cluster import ClusterError, load_cluster
    from analyzer.numerics import NumericsInputError, require
    from analyzer.report import ReportInputs, build_report

    spec = None
    if cluster != "none":
        try:
            spec = load_cluster(cluster, ranks_per_node)
        except ClusterError as e:
            _fail(str(e))
    _output(output, trace, diff_with, expected, ref)
    t = _load(trace)
    other = _load(diff_with) if diff_with else None
    golden = _load(expected) if expected else None
    numerics_ref = _load(ref) if ref else None
    inputs = ReportInputs(
        source=trace,
        other=other,
        other_source=diff_with,
        expected=golden,
        eager_bytes=eager_bytes,
        cluster=spec,
        ref=numerics_ref,
        ref_source=ref,
    )
    try:
        if numerics_ref is not None:
            require(t, trace)
        rep = build_report(t, inputs)
    except NumericsInputError as e:
        _fail(str(e))
    from analyzer.render.html import render

    page = render(rep)
    with _write(output) as f:
        f.write(page)
    stuck = len(rep.hang.stuck) if rep.hang is not None else 0
    typer.echo(
        f"wrote {output}: {len(rep.findings)} finding{'s' if len(rep.findings) != 1 else ''}, "
        + (f"hang ({stuck} ranks stuck)" if stuck else "no hang")
        + ("" if rep.diff is None else ", same pattern as B" if rep.diff.equal else ", differs from B")
        + ("" if rep.numerics is None else f", {len(rep.numerics.findings)} numerics finding(s)")
    )
