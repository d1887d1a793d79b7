"""`analyzer numerics`: values that differ between ranks or from a reference recording."""

from __future__ import annotations

import typer

from analyzer.cli.common import _fail, _load, _render


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
