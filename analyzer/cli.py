"""`analyzer`: parse, call the library, render. Exit 0 clean, 1 findings, 2 bad input."""

from __future__ import annotations

import contextlib
import sys

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Analyze commtrace traces (and Flight Recorder dumps): summary, checks, hangs, "
    "diffs, an HTML report, exports (Perfetto, parquet, JSON).",
)


@app.callback()
def _root() -> None:
    """commtrace analyzer."""


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


def _load(path: str):
    """The trace at `path`; exit 2 with one line when it cannot be read or holds no event at all
    (an empty recording is bad input, not a clean run)."""
    from analyzer.loader import LoadError, load

    try:
        t = load(path)
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


@app.command()
def summary(
    trace: str = typer.Argument(..., help="A .trace file or a folder of per-rank parts."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Collectives and bytes per group (mesh dim) and op, per rank class."""
    from analyzer.compare.summary import summarize

    t = _load(trace)
    s = summarize(t)
    _render(json_out, "summary", t, s)


@app.command()
def cost(
    traces: list[str] = typer.Argument(..., help="One trace, or several to compare side by side (what-if)."),
    cluster: list[str] = typer.Option(
        ["h100-dgx"],
        "--cluster",
        help="A preset (h100-dgx, h200-dgx, a100-dgx, gb200-nvl72, h100-a3mega) or a TOML file; "
        "repeat to compare clusters.",
    ),
    ranks_per_node: int | None = typer.Option(
        None, "--ranks-per-node", help="Ranks placed on each node (consecutive, as torchrun); default: GPUs per node."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Communication time per step on a cluster: per rank class, mesh dim x op x phase, serial
    and exposed (what cannot overlap with compute). Several traces or --cluster options: side by
    side. The model and its calibration: docs/cost-model.md."""
    from analyzer.cost.cluster import ClusterError, load_cluster
    from analyzer.cost.step import step_cost
    from analyzer.render import cost as render

    try:
        specs = [load_cluster(c, ranks_per_node) for c in cluster]
    except ClusterError as e:
        _fail(str(e))
    loaded = [(path, _load(path)) for path in traces]
    runs = [
        render.Run(trace=path, world_size=t.world_size, cost=step_cost(t, spec)) for path, t in loaded for spec in specs
    ]
    if json_out:
        render.print_json(runs)
    else:
        from rich.console import Console

        render.console(Console(), runs)


@app.command()
def check(
    trace: str = typer.Argument(..., help="A .trace file or a folder of per-rank parts."),
    eager_bytes: int = typer.Option(
        0, "--eager-bytes", help="Blocking sends up to this size complete without a posted recv (eager protocol)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
) -> None:
    """Mismatched collectives, skipped collectives, p2p and group-creation errors, ranks that
    failed or left no events, with culprits. Exit 0 when clean, 1 with findings, 2 bad input or
    no events at all."""
    from analyzer.checks import run_checks
    from analyzer.checks.options import CheckOptions

    t = _load(trace)
    checked = run_checks(t, CheckOptions(eager_bytes=eager_bytes))
    _render(json_out, "findings", t, checked.findings, checked.notes)
    raise typer.Exit(1 if checked.findings else 0)


@app.command()
def lint(
    trace: str = typer.Argument(..., help="A .trace file or a folder of per-rank parts."),
    cluster: str = typer.Option(
        None, "--cluster", help="A cluster preset (h100-dgx, ...) or TOML file: its placement, and each advice's time."
    ),
    ranks_per_node: int = typer.Option(
        None, "--ranks-per-node", help="Ranks per node, placed consecutively (default: the cluster's, else 8)."
    ),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when there is any advice (for CI)."),
    json_out: bool = typer.Option(False, "--json", help="Print the advice as JSON."),
) -> None:
    """Comm lint: advice (severity `advice`) on a trace that runs correctly: tp / cp / ep groups
    across nodes, unbucketed collectives, wider dtypes than the mixed-precision policy, DTensor
    round trips, repeated parameter all-gathers, blocking collectives in backward. Exit 0 with
    or without advice (1 with --strict and advice), 2 bad input."""
    from analyzer.lint import run_lint
    from analyzer.lint.options import LintOptions, Placement, for_cluster

    if ranks_per_node is not None and ranks_per_node < 1:
        _fail(f"--ranks-per-node must be at least 1, not {ranks_per_node}")
    if cluster is not None:
        from analyzer.cost.cluster import ClusterError, load_cluster

        try:
            options = for_cluster(load_cluster(cluster, ranks_per_node))
        except ClusterError as e:
            _fail(str(e))
    elif ranks_per_node is not None:
        options = LintOptions(placement=Placement(ranks_per_node=ranks_per_node, assumed=False))
    else:
        options = LintOptions()
    t = _load(trace)
    linted = run_lint(t, options)
    _render(json_out, "advice", t, linted.findings, linted.notes, options.cluster)
    raise typer.Exit(1 if strict and linted.findings else 0)


@app.command()
def numerics(
    trace: str = typer.Argument(..., help="A trace recorded with `--mode local --numerics`."),
    ref: str = typer.Option(
        None,
        "--ref",
        help="A reference recording of the same model (e.g. its 1-rank twin): report the first value "
        "that differs from it.",
    ),
    rtol: float = typer.Option(
        None, "--rtol", help="Relative tolerance for every dtype (default by dtype: float32 1e-4, bfloat16 3e-2, ...)."
    ),
    atol: float = typer.Option(None, "--atol", help="Absolute tolerance under every scale (default 1e-9)."),
    json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
) -> None:
    """Numerics parity: values declared replicated that differ between ranks (replica_divergence)
    and, with --ref, the first module output, gradient or parameter that differs from the
    reference (numerics_divergence), with the collectives recorded around it. Exit 0 equal within
    tolerance, 1 divergence, 2 bad input."""
    from analyzer.checks.numerics_tolerance import ATOL, Tolerance
    from analyzer.numerics import NumericsInputError, require, run

    for name, value in (("--rtol", rtol), ("--atol", atol)):
        if value is not None and not value >= 0:
            _fail(f"{name} must be a number >= 0, got {value}")
    t = _load(trace)
    r = _load(ref) if ref is not None else None
    try:
        require(t, trace)
        if r is not None:
            require(r, ref)
        checked = run(t, r, Tolerance(rtol=rtol, atol=ATOL if atol is None else atol), ref_path=ref or "")
    except NumericsInputError as e:
        _fail(str(e))
    _render(json_out, "numerics", t, checked.findings, checked.notes, ref)
    raise typer.Exit(1 if checked.findings else 0)


@app.command()
def hang(
    trace: str = typer.Argument(..., help="A trace (dry run or killed run) or a folder of parts / FR dumps."),
    expected: str = typer.Option(
        None, "--expected", help="Golden trace of the same config: say what each stuck rank should have run next."
    ),
    dot: str = typer.Option(None, "--dot", help="Write the wait-for graph as Graphviz DOT to this file."),
    eager_bytes: int = typer.Option(
        0, "--eager-bytes", help="Blocking sends up to this size complete without a posted recv (eager protocol)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
) -> None:
    """Post-mortem of a hang: stuck ranks, wait-for graph, root causes. Exit 0 no hang, 1 hang
    (or failed / missing ranks)."""
    from analyzer.hang import analyze, frontier_rows

    if dot:
        _output(dot, trace, expected, what="--dot")
    t = _load(trace)
    golden = _load(expected) if expected else None
    report = analyze(t, golden, eager_bytes)
    if dot:
        with _write(dot, what="--dot") as f:
            from analyzer.render.dot import to_dot

            f.write(to_dot(report.graph, report.stuck, report.labels, report.on_cycle))
    _render(json_out, "hang", t, report, frontier_rows(t, report))
    raise typer.Exit(1 if report.hung or report.findings else 0)


@app.command()
def diff(
    a: str = typer.Argument(..., help="Trace A (e.g. the golden or the old config)."),
    b: str = typer.Argument(..., help="Trace B."),
    json_out: bool = typer.Option(False, "--json", help="Print the divergences and volume table as JSON."),
    alias: list[str] = typer.Option(
        [],
        "--alias",
        help="OLD=NEW: compare mesh dim OLD as NEW (repeatable; "
        "adds to / overrides the defaults dp_shard=fsdp, dp_shard_cp=fsdp, "
        "dp_shard_in_ep=ep, dp_shard_mod_ep=efsdp).",
    ),
    no_aliases: bool = typer.Option(False, "--no-aliases", help="Compare mesh dims by their recorded names."),
    groups: bool = typer.Option(
        False,
        "--groups",
        help="Also compare group creation, mesh events and collectives on size-1 groups (left out by default).",
    ),
) -> None:
    """How the comm pattern moved from A to B: first divergence per rank class, inserted /
    removed / changed runs, and volume per mesh dim x op x phase. Exit 0 equal, 1 different or
    either side has failed or missing ranks."""
    from analyzer.checks import missing_ranks
    from analyzer.checks.options import CheckOptions
    from analyzer.compare.diff import diff_traces
    from analyzer.compare.normalize import Options, parse_aliases

    try:
        extra = parse_aliases(alias)
    except ValueError as e:
        _fail(str(e))
    options = Options(groups=groups, size_one=groups)
    options.aliases = extra if no_aliases else {**options.aliases, **extra}
    ta, tb = _load(a), _load(b)
    d = diff_traces(ta, tb, options)
    incomplete = {
        k: missing_ranks.check(t, CheckOptions()).findings for k, t in (("a", ta), ("b", tb))
    }  # failed or missing ranks
    _render(json_out, "diff", ta, tb, d, incomplete)
    raise typer.Exit(0 if d.equal and not incomplete["a"] and not incomplete["b"] else 1)


EXPORT_FORMATS = ("perfetto", "parquet", "json")


@app.command()
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


@app.command()
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


golden_app = typer.Typer(
    no_args_is_help=True,
    help="Golden comm patterns of the examples: compare traces with traces/ (re-recording them is `tracer golden`).",
)
app.add_typer(golden_app, name="golden")


@golden_app.command("check")
def golden_check(
    given: list[str] = typer.Argument(
        None, help="Traces to check, matched to goldens by file name (to re-record every example: tracer golden check)."
    ),
    examples: str = typer.Option("examples", "--examples", help="Folder of example configs / scripts."),
    traces_dir: str = typer.Option("traces", "--traces", help="Folder of golden traces."),
) -> None:
    """Diff each given trace against traces/<name>.trace (torch-free).
    Exit 0 all equal, 1 any change (the diff is printed), 2 bad input."""
    from analyzer.compare.golden import check
    from traceformat.golden import given_traces

    try:
        traces = given_traces(examples, given or [])
    except ValueError as e:
        _fail(str(e))
    if not traces:
        _fail("give the traces to check (to re-record every example and check it: tracer golden check)")
    results = check(examples, traces_dir, traces)
    from rich.console import Console

    from analyzer.loader import load
    from analyzer.render import console as render_console

    out = Console()
    for r in results:
        colour = "green" if r.status == "same" else "red"
        hint = {"new": " (no golden yet: run `tracer golden update`)", "error": f": {r.error}"}.get(r.status, "")
        out.print(f"[{colour}]{r.status:8s}[/] {r.name} ({r.golden}){hint}")
        if r.status == "changed":
            render_console.diff(out, load(r.golden), load(r.trace), r.diff)
    if not results:
        _fail("no examples matched")
    if any(r.status == "error" for r in results):
        raise typer.Exit(2)
    changed = [r.name for r in results if r.status in ("changed", "new")]
    if changed:
        out.print(
            f"[bold red]✗ {len(changed)} comm pattern(s) differ from their goldens[/]: {', '.join(changed)}; "
            "if intended, run `tracer golden update` and commit traces/"
        )
    raise typer.Exit(1 if changed else 0)


def main() -> None:
    from traceformat.output import QuietPipe

    if sys.stdout is not None:
        sys.stdout = QuietPipe(sys.stdout)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
