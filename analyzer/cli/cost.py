"""`analyzer cost` and `analyzer lint`: what the communication costs on a cluster, and advice on a
trace that runs correctly."""

from __future__ import annotations

import typer

from analyzer.cli.common import _fail, _load, _render


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
