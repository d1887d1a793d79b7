"""analyzer numerics: replica divergence within a trace, and (with a reference recording) the
first value that differs from the reference. Composes the two numerics checks
(analyzer/checks/numerics_replicas.py, numerics_parity.py); bad input is a NumericsInputError
(one line, exit 2)."""

from __future__ import annotations

from analyzer.checks import numerics_parity, numerics_replicas
from analyzer.checks.numerics_tolerance import Tolerance
from analyzer.checks.options import Checked
from analyzer.model.trace import Trace
from traceformat.format import Mode

RECORD_HOW = "record it with `tracer record ... --mode local --numerics` (or --mode real)"


class NumericsInputError(ValueError):
    """A trace without numerics, or a reference of another model (one line)."""


def require(trace: Trace, path: str) -> None:
    """NumericsInputError unless the trace holds numerics."""
    if trace.numerics is not None and trace.numerics.height:
        return
    if trace.mode is Mode.FAKE:
        raise NumericsInputError(f"{path}: a fake-mode trace has no numerics (no real values): {RECORD_HOW}")
    if trace.mode not in (Mode.LOCAL, Mode.REAL):
        raise NumericsInputError(f"{path}: a {trace.header.get('mode')} trace has no numerics: {RECORD_HOW}")
    raise NumericsInputError(f"{path}: recorded without --numerics: {RECORD_HOW}")


def run(
    trace: Trace, ref: Trace | None = None, tol: Tolerance | None = None, ref_path: str = "the reference"
) -> Checked:
    """replica_divergence findings (first diverging step), then with `ref` the first
    numerics_divergence (that one first). Both traces must hold numerics (see `require`)."""
    out = Checked()
    if ref is not None:  # the answer to "where does it stop computing the reference's values" first
        try:
            numerics_parity.same_model(trace, ref, ref_path)
        except numerics_parity.ReferenceMismatch as e:
            raise NumericsInputError(str(e)) from None
        out.extend(numerics_parity.check(trace, ref, tol))
    out.extend(numerics_replicas.check(trace, tol))
    return out
