"""`tracer golden check|update`: re-record the examples and check or rewrite their golden traces
in traces/ (the comparison itself is the analyzer's `golden check`, run as a subprocess)."""

from __future__ import annotations

import os

import typer

golden_app = typer.Typer(
    no_args_is_help=True, help="Golden comm patterns of the examples: re-record them and check or update traces/."
)


def _examples_folder(examples: str) -> None:
    from tracer.cli import _fail

    if not os.path.isdir(examples):
        _fail(f"{examples}: no such folder (give --examples DIR)")


def _recording_errors(errors: dict[str, str]) -> None:
    for name, error in errors.items():
        typer.echo(f"error    {name}: {error}")


@golden_app.command("check")
def golden_check(
    examples: str = typer.Option("examples", "--examples", help="Folder of example configs / scripts."),
    traces_dir: str = typer.Option("traces", "--traces", help="Folder of golden traces."),
) -> None:
    """Re-record each example and diff it against traces/<name>.trace (`analyzer golden check` on
    the recordings). Exit 0 all equal, 1 any change (the diff is printed), 2 bad input or a failed
    recording."""
    import tempfile

    from tracer.cli import _analyzer
    from tracer.golden import record_all

    _examples_folder(examples)
    with tempfile.TemporaryDirectory(prefix="commtrace-golden-") as work:
        traces, errors = record_all(examples, work)
        _recording_errors(errors)
        rc = (
            _analyzer("golden", "check", "--examples", examples, "--traces", traces_dir, *traces.values())
            if traces
            else 0
        )
    raise typer.Exit(2 if errors else rc)


@golden_app.command("update")
def golden_update(
    given: list[str] = typer.Argument(
        None, help="Traces to adopt as goldens (matched to examples by file name); default: re-record every example."
    ),
    examples: str = typer.Option("examples", "--examples", help="Folder of example configs / scripts."),
    traces_dir: str = typer.Option("traces", "--traces", help="Folder of golden traces."),
) -> None:
    """Re-record each example (or take the given traces) and rewrite its golden (canonical: ts 0,
    repo-relative paths); commit traces/ afterwards."""
    import tempfile

    from traceformat.output import OutputError, refuse_inputs
    from tracer.cli import _fail
    from tracer.golden import record_all, update

    _examples_folder(examples)
    for p in given or ():
        if not os.path.exists(p):
            _fail(f"{p}: no such file")
        try:  # the golden this trace would rewrite is not the trace itself
            refuse_inputs(
                os.path.join(traces_dir, os.path.splitext(os.path.basename(p))[0] + ".trace"), [p], what="golden"
            )
        except OutputError as e:
            _fail(str(e))
    with tempfile.TemporaryDirectory(prefix="commtrace-golden-") as work:
        if given:
            traces, errors = {os.path.splitext(os.path.basename(p))[0]: p for p in given}, dict[str, str]()
        else:
            traces, errors = record_all(examples, work)
        _recording_errors(errors)
        written = update(examples, traces_dir, traces)
    for path in written:
        typer.echo(f"written  {os.path.splitext(os.path.basename(path))[0]} ({path})")
    if not written and not errors:
        _fail("no examples matched")
    raise typer.Exit(2 if errors else 0)
