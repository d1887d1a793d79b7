"""A collective in a wider dtype than the mixed-precision policy implies: parameters
all-gathered wider than `param_dtype`, gradients reduced wider than `reduce_dtype`, so the
bytes on the wire (and the time) double for nothing the policy asked for.

The policy is read from the trace header's config snapshot: commtrace's job TOML and TorchTitan
both name it `training.mixed_precision_param` / `training.mixed_precision_reduce` (a TorchTitan
recording without those overrides: TorchTitan's defaults, bfloat16 / float32). TorchTitan's
default reduces gradients in float32 on purpose: that is the policy, not advice. A trace without
a policy (a script) is not judged: a note says so.

Judged: FSDP2's parameter all-gathers (against param) and the gradient reductions of backward
that no DTensor redistribute issued (reduce-scatters, all-reduces: against reduce)."""

from __future__ import annotations

import polars as pl

from analyzer.lint.common import DTYPE_BYTES, advice, config, priced, summarize, time_text, where
from analyzer.lint.options import Linted, LintOptions
from analyzer.model.findings import ADVICE, Kind
from analyzer.model.trace import Trace

WIDE_DTYPE = Kind(
    name="wide_dtype",
    about="a collective in a wider dtype than the mixed-precision policy implies",
    severity=ADVICE,
)

TORCHTITAN_DEFAULTS = {"mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32"}
"""torchtitan.config.configs.Training's defaults (0.3.0)."""

GRADIENT_OPS = ("reduce_scatter_tensor", "reduce_scatter", "all_reduce")
GATHER_OPS = ("all_gather_into_tensor", "all_gather_into_tensor_coalesced")


def _wider(width: int) -> list[str]:
    """The dtypes wider than `width` bytes (matched on the categorical column: no string per row)."""
    return [name for name, w in DTYPE_BYTES.items() if w > width]


def policy(trace: Trace) -> dict[str, str] | None:
    """{"mixed_precision_param", "mixed_precision_reduce"} from the header, None where unknown."""
    c = config(trace)
    training = c.get("training")
    if isinstance(training, dict) and isinstance(training.get("mixed_precision_param"), str):
        return {k: str(training.get(k) or "") for k in TORCHTITAN_DEFAULTS}
    titan = c.get("torchtitan")
    if isinstance(titan, dict):
        out = dict(TORCHTITAN_DEFAULTS)
        over = [str(x) for x in titan.get("overrides") or []]
        for i, arg in enumerate(over):  # --training.mixed_precision_param bfloat16 or =bfloat16
            name, _, value = arg.lstrip("-").partition("=")
            key = name.rsplit(".", 1)[-1]
            if key in out:
                out[key] = value or (over[i + 1] if i + 1 < len(over) else out[key])
        return out
    return None


def lint(trace: Trace, options: LintOptions, comm: pl.DataFrame) -> Linted:
    out = Linted()
    p = policy(trace)
    if p is None:
        if comm.filter(pl.col("fsdp")).height:
            out.notes.append("lint: no mixed-precision policy in the trace header: collective dtypes not judged")
        return out
    param, reduce = (DTYPE_BYTES.get(p[k]) for k in ("mixed_precision_param", "mixed_precision_reduce"))
    gathers = pl.col("fsdp") & pl.col("op").is_in(GATHER_OPS)
    grads = (pl.col("phase") == "backward") & (pl.col("parent") < 0) & pl.col("op").is_in(GRADIENT_OPS)
    wide = pl.lit(False)
    if param is not None:
        wide = wide | (gathers & pl.col("dtype").is_in(_wider(param)))
    if reduce is not None:
        wide = wide | (grads & pl.col("dtype").is_in(_wider(reduce)))
    rows = priced(comm.filter(wide & (pl.col("size") > 1)), options)
    if options.cost is not None and rows.height:
        # the same collectives in the policy's dtype: the bytes scale by its width over theirs
        width = pl.col("dtype").cast(pl.String).replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Float64)
        ratio = pl.when(gathers).then(pl.lit(param)).otherwise(pl.lit(reduce)).cast(pl.Float64) / width
        narrow = options.cost(
            rows.with_columns(
                in_bytes=(pl.col("in_bytes") * ratio).cast(pl.Int64),
                out_bytes=(pl.col("out_bytes") * ratio).cast(pl.Int64),
            )
        )
        rows = rows.with_columns(seconds=pl.col("seconds") - narrow)
    for r in summarize(rows, ["label", "op", "dtype", "phase"]):
        gathered = r["op"] in GATHER_OPS
        meant = p["mixed_precision_param" if gathered else "mixed_precision_reduce"]
        what = "parameters all-gathered" if gathered else "gradients reduced"
        out.findings.append(
            advice(
                WIDE_DTYPE,
                trace,
                r,
                f"{r['per_step']} {r['op']} per step on {r['label']} in {r['dtype']}: {what} wider than the "
                f"policy's {'param' if gathered else 'reduce'} dtype {meant}, {where(r)}"
                f"{time_text(r['seconds'], 'that the policy would save')}: cast before the collective "
                "(FSDP: MixedPrecisionPolicy), or state the wider dtype in the policy if it is meant",
            )
        )
    return out
