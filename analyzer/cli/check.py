"""`analyzer summary`, `analyzer check` and `analyzer hang`: one trace, what it holds and what is
wrong with it."""

from __future__ import annotations

import typer

from analyzer.cli.common import _load, _output, _render, _write, fr_options


def summary(
    trace: str = typer.Argument(..., help="A .trace file or a folder of per-rank parts."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    jobs: int = typer.Option(
        None, "-j", "--jobs", help="Flight Recorder dumps: processes decoding them (default: every CPU)."
    ),
    ray: str = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Flight Recorder dumps: decode and reduce them on a Ray cluster: 'auto' (RAY_ADDRESS or a "
        "running cluster), 'local' (start one here), or host:port.",
    ),
) -> None:
    """Collectives and bytes per group (mesh dim) and op, per rank class."""
    from analyzer.compare.summary import summarize

    t = _load(trace, fr=fr_options(jobs, ray))
    s = summarize(t)
    _render(json_out, "summary", t, s)


def check(
    trace: str = typer.Argument(..., help="A .trace file or a folder of per-rank parts."),
    eager_bytes: int = typer.Option(
        0, "--eager-bytes", help="Blocking sends up to this size complete without a posted recv (eager protocol)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    jobs: int = typer.Option(
        None, "-j", "--jobs", help="Flight Recorder dumps: processes decoding them (default: every CPU)."
    ),
    ray: str = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Flight Recorder dumps: decode and reduce them on a Ray cluster: 'auto' (RAY_ADDRESS or a "
        "running cluster), 'local' (start one here), or host:port.",
    ),
) -> None:
    """Mismatched collectives, skipped collectives, p2p and group-creation errors, ranks that
    failed or left no events, with culprits. Exit 0 when clean, 1 with findings, 2 bad input or
    no events at all."""
    from analyzer.checks import run_checks
    from analyzer.checks.options import CheckOptions

    t = _load(trace, fr=fr_options(jobs, ray))
    checked = run_checks(t, CheckOptions(eager_bytes=eager_bytes))
    _render(json_out, "findings", t, checked.findings, checked.notes)
    raise typer.Exit(1 if checked.findings else 0)


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
    jobs: int = typer.Option(
        None, "-j", "--jobs", help="Flight Recorder dumps: processes decoding them (default: every CPU)."
    ),
    ray: str = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Flight Recorder dumps: decode and reduce them on a Ray cluster: 'auto' (RAY_ADDRESS or a "
        "running cluster), 'local' (start one here), or host:port.",
    ),
    full_history: bool = typer.Option(
        False,
        "--full-history",
        help="Flight Recorder dumps: read every rank's whole history (default: each group's frontier and "
        "the history just before it, which is all the verdict needs; --expected reads it all).",
    ),
) -> None:
    """Post-mortem of a hang: stuck ranks, wait-for graph, root causes. Exit 0 no hang, 1 hang
    (or failed / missing ranks)."""
    from analyzer.hang import analyze, frontier_rows

    if dot:
        _output(dot, trace, expected, what="--dot")
    t = _load(trace, fr=fr_options(jobs, ray, frontier=not full_history and not expected))
    golden = _load(expected) if expected else None
    report = analyze(t, golden, eager_bytes)
    if dot:
        with _write(dot, what="--dot") as f:
            from analyzer.render.dot import to_dot

            f.write(to_dot(report.graph, report.stuck, report.labels, report.on_cycle))
    _render(json_out, "hang", t, report, frontier_rows(t, report))
    raise typer.Exit(1 if report.hung or report.findings else 0)
