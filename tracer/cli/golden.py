"""`tracer golden check|update`: re-record the examples and check or rewrite their golden traces
in traces/ (the comparison itself is the analyzer's `golden check`, run as a subprocess)."""

from __future__ import annotations

import os

import typer

from tracer.cli.common import analyzer, fail

golden_app = typer.Typer(
    no_args_is_help=True, help="Golden comm patterns of the examples: re-record them and check or update traces/."
)


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

    from traceformat.golden import check_examples_folder
    from tracer.record.golden import record_all

    try:
        check_examples_folder(examples)
    except ValueError as e:
        fail(str(e))
    with tempfile.TemporaryDirectory(prefix="commtrace-golden-") as work:
        traces, errors = record_all(examples, work)
        _recording_errors(errors)
        rc = (
            analyzer("golden", "check", "--examples", examples, "--traces", traces_dir, *traces.values())
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

    from traceformat.golden import given_traces
    from tracer.record.golden import record_all, update

    try:  # the golden a given trace would rewrite is not the trace itself
        adopted = given_traces(examples, given or [], traces_dir)
    except ValueError as e:
        fail(str(e))
    with tempfile.TemporaryDirectory(prefix="commtrace-golden-") as work:
        if given:
            traces, errors = adopted, dict[str, str]()
        else:
            traces, errors = record_all(examples, work)
        _recording_errors(errors)
        try:
            written = update(examples, traces_dir, traces)
        except ValueError as e:  # a golden that cannot be written: one line naming it
            fail(str(e))
    for path in written:
        typer.echo(f"written  {os.path.splitext(os.path.basename(path))[0]} ({path})")
    if not written and not errors:
        fail("no examples matched")
    raise typer.Exit(2 if errors else 0)
