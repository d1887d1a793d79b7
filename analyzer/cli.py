"""`analyzer`: parse, call the library, render. Exit 0 clean, 1 findings, 2 bad input."""

from __future__ import annotations

import sys

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Analyze commtrace traces (and Flight Recorder dumps): summary, checks, diffs.")


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
    from analyzer.load import LoadError, load

    try:
        return load(path)
    except LoadError as e:
        _fail(str(e))


@app.command()
def summary(trace: str = typer.Argument(..., help="A .trace file or a folder of per-rank parts."),
            json_out: bool = typer.Option(False, "--json", help="Print JSON instead of tables.")) -> None:
    """Collectives and bytes per group (mesh dim) and op, per rank class."""
    from analyzer.summary import summarize

    t = _load(trace)
    s = summarize(t)
    _render(json_out, "summary", t, s)


@app.command()
def check(trace: str = typer.Argument(..., help="A .trace file or a folder of per-rank parts."),
          json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON.")) -> None:
    """Mismatched collectives, skipped collectives, p2p and group-creation errors, with culprits.
    Exit 0 when clean, 1 with findings."""
    from analyzer.checks import run_checks

    t = _load(trace)
    found = run_checks(t)
    _render(json_out, "findings", t, found)
    raise typer.Exit(1 if found else 0)


@app.command()
def hang(trace: str = typer.Argument(..., help="A trace (dry run or killed run) or a folder of parts / FR dumps."),
         expected: str = typer.Option(None, "--expected", help="Golden trace of the same config: say what each "
                                                               "stuck rank should have run next."),
         dot: str = typer.Option(None, "--dot", help="Write the wait-for graph as Graphviz DOT to this file."),
         eager_bytes: int = typer.Option(0, "--eager-bytes", help="Blocking sends up to this size complete "
                                                                  "without a posted recv (eager protocol)."),
         json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON.")) -> None:
    """Post-mortem of a hang: stuck ranks, wait-for graph, root causes. Exit 0 no hang, 1 hang."""
    from analyzer.hang import analyze, frontier_rows

    t = _load(trace)
    golden = _load(expected) if expected else None
    report = analyze(t, golden, eager_bytes)
    if dot:
        with open(dot, "w") as f:
            f.write(report.dot)
    _render(json_out, "hang", t, report, frontier_rows(t, report))
    raise typer.Exit(1 if report.hung or report.findings else 0)


@app.command()
def diff(a: str = typer.Argument(..., help="Trace A (e.g. the golden or the old config)."),
         b: str = typer.Argument(..., help="Trace B."),
         json_out: bool = typer.Option(False, "--json", help="Print the divergences and volume table as JSON.")) -> None:
    """How the comm pattern moved from A to B: first divergence per rank class, inserted /
    removed / changed runs, and volume per mesh dim x op x phase. Exit 0 equal, 1 different."""
    from analyzer.diff import diff_traces

    ta, tb = _load(a), _load(b)
    d = diff_traces(ta, tb)
    _render(json_out, "diff", ta, tb, d)
    raise typer.Exit(0 if d.equal else 1)


golden_app = typer.Typer(no_args_is_help=True, help="Golden comm patterns of the examples: check or update traces/.")
app.add_typer(golden_app, name="golden")


def _golden(update: bool, examples: str, traces_dir: str, given: list[str] | None) -> None:
    import os
    import tempfile

    from analyzer.golden import run

    if not os.path.isdir(examples):
        _fail(f"{examples}: no such folder (give --examples DIR)")
    named = {os.path.splitext(os.path.basename(p))[0]: p for p in given} if given else None
    for p in given or ():
        if not os.path.exists(p):
            _fail(f"{p}: no such file")
    with tempfile.TemporaryDirectory(prefix="commtrace-golden-") as work:
        results = run(examples, traces_dir, work, update=update, given=named)
    from rich.console import Console

    from analyzer.load import load
    from analyzer.render import console as render_console

    out = Console()
    for r in results:
        colour = {"same": "green", "written": "green", "changed": "red", "new": "red", "error": "red"}[r.status]
        hint = {"new": " (no golden yet: run `analyzer golden update`)", "error": f": {r.error}"}.get(r.status, "")
        out.print(f"[{colour}]{r.status:8s}[/] {r.name} ({r.golden}){hint}")
        if r.status == "changed":
            render_console.diff(out, load(r.golden), load(r.trace), r.diff)
    if not results:
        _fail("no examples matched")
    if any(r.status == "error" for r in results):
        raise typer.Exit(2)
    changed = [r.name for r in results if r.status in ("changed", "new")]
    if changed:
        out.print(f"[bold red]✗ {len(changed)} comm pattern(s) differ from their goldens[/]: {', '.join(changed)}; "
                  "if intended, run `analyzer golden update` and commit traces/")
    raise typer.Exit(1 if changed else 0)


@golden_app.command("check")
def golden_check(given: list[str] = typer.Argument(None, help="Traces to check (matched to goldens by file "
                                                              "name); default: re-record every example."),
                 examples: str = typer.Option("examples", "--examples", help="Folder of example configs / scripts."),
                 traces_dir: str = typer.Option("traces", "--traces", help="Folder of golden traces.")) -> None:
    """Re-record each example (needs torch) and diff it against traces/<name>.trace.
    Exit 0 all equal, 1 any change (the diff is printed), 2 bad input or a failed recording."""
    _golden(False, examples, traces_dir, given)


@golden_app.command("update")
def golden_update(given: list[str] = typer.Argument(None, help="Traces to adopt as goldens (by file name)."),
                  examples: str = typer.Option("examples", "--examples", help="Folder of example configs / scripts."),
                  traces_dir: str = typer.Option("traces", "--traces", help="Folder of golden traces.")) -> None:
    """Re-record each example and rewrite its golden (canonical: ts 0, repo-relative paths)."""
    _golden(True, examples, traces_dir, given)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
