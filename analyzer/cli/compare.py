"""`analyzer diff` and `analyzer golden check`: two traces (or a trace and its golden), how the
comm pattern moved."""

from __future__ import annotations

import typer

from analyzer.cli.common import _fail, _load, _render


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


golden_app = typer.Typer(
    no_args_is_help=True,
    help="Golden comm patterns of the examples: compare traces with traces/ (re-recording them is `tracer golden`).",
)


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
