"""How far two digests of the same value may differ (`analyzer numerics --rtol / --atol`).

A parallel layout sums in another order (a reduce-scatter over 4 ranks, a matmul split in 4),
so equal values agree to a few ulps per reduction, growing over layers and steps: the default
relative tolerance follows the dtype's precision with room for that. Digests are compared as
relative errors: the sum against sqrt(numel * sumsq) (the largest a sum of those elements can
be, and the scale of its rounding error), the L2 norm against the norm, max |x| against max |x|,
each scale no smaller than its class's in that step (rel_error: class_rms).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

RTOL = {"float64": 1e-9, "float32": 1e-4, "float16": 5e-3, "bfloat16": 3e-2}
"""Default relative tolerance by dtype."""
DEFAULT_RTOL = 1e-4
"""For a dtype not in RTOL (float8 and integers are not digested)."""
ATOL = 1e-9
"""Absolute floor under every scale: values that are all but zero on both sides agree."""


@dataclass(kw_only=True, slots=True)
class Tolerance:
    rtol: float | None = None
    """Relative tolerance for every dtype (None: RTOL by dtype)."""
    atol: float = ATOL
    """Absolute tolerance added to every scale."""

    def rtol_expr(self, dtype: pl.Expr) -> pl.Expr:
        if self.rtol is not None:
            return pl.lit(self.rtol, dtype=pl.Float64)
        return dtype.replace_strict(RTOL, default=DEFAULT_RTOL, return_dtype=pl.Float64)


def rel_error(a: str, b: str, numel: str, atol: float, class_rms: pl.Expr | None = None) -> pl.Expr:
    """The relative error between digests with column prefixes `a` and `b` (`b` the reference
    scale): the largest of the sum's, the norm's and max |x|'s.

    class_rms: the root mean square element of the value's class in its step (every gradient of
    the step, every module output, ...), a floor under each scale. Rounding error comes from the
    computation, whose operands are of the class's size, not of the value's: a value that is zero
    up to rounding (a bias gradient before a norm, masked positions) differs by noise that is
    large against itself and negligible against its class."""
    n = pl.col(numel).cast(pl.Float64).clip(1)
    norm_a, norm_b = pl.col(f"{a}sumsq").clip(0).sqrt(), pl.col(f"{b}sumsq").clip(0).sqrt()
    scale_sum = (n * pl.col(f"{b}sumsq").clip(0)).sqrt()
    scale_max = pl.col(f"{b}amax").abs()
    if class_rms is not None:
        scale_sum = pl.max_horizontal(scale_sum, n * class_rms)
        norm_b_floor = pl.max_horizontal(norm_b, n.sqrt() * class_rms)
        scale_max = pl.max_horizontal(scale_max, class_rms)
    else:
        norm_b_floor = norm_b
    return pl.max_horizontal(
        (pl.col(f"{a}sum") - pl.col(f"{b}sum")).abs() / (scale_sum + atol),
        (norm_a - norm_b).abs() / (norm_b_floor + atol),
        (pl.col(f"{a}amax") - pl.col(f"{b}amax")).abs() / (scale_max + atol),
    )
