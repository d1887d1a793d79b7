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
    if json_out:
        from analyzer.render import json as render_json

        render_json.summary(t, s)
    else:
        from rich.console import Console

        from analyzer.render import console

        console.summary(Console(), t, s)


@app.command()
def check(trace: str = typer.Argument(..., help="A .trace file or a folder of per-rank parts."),
          json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON.")) -> None:
    """Mismatched collectives, skipped collectives, p2p and group-creation errors, with culprits.
    Exit 0 when clean, 1 with findings."""
    from analyzer.checks import run_checks

    t = _load(trace)
    found = run_checks(t)
    if json_out:
        from analyzer.render import json as render_json

        render_json.findings(t, found)
    else:
        from rich.console import Console

        from analyzer.render import console

        console.findings(Console(), t, found)
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
    if json_out:
        from analyzer.render import json as render_json

        render_json.hang(t, report, frontier_rows(t, report))
    else:
        from rich.console import Console

        from analyzer.render import console

        console.hang(Console(), t, report, frontier_rows(t, report))
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
    if json_out:
        from analyzer.render import json as render_json

        render_json.diff(ta, tb, d)
    else:
        from rich.console import Console

        from analyzer.render import console

        console.diff(Console(), ta, tb, d)
    raise typer.Exit(0 if d.equal else 1)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
