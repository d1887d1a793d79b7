"""replica_divergence: a value declared replicated (a DTensor's Replicate mesh dim, a plain
parameter that data / tensor parallel keeps identical) that differs between the ranks of its
group, beyond the dtype's tolerance. One finding per value (FQN and what) whose first divergence
is at the first diverging step; the values that diverge only later (its consequences) are
counted in a note."""

from __future__ import annotations

import polars as pl

from analyzer.checks.numerics_tolerance import Tolerance, rel_error
from analyzer.checks.options import Checked
from analyzer.model.findings import Finding, Kind
from analyzer.model.numerics import PHASE_ORDER
from analyzer.model.text import ranks_text
from analyzer.model.trace import Trace

REPLICA_DIVERGENCE = Kind(
    name="replica_divergence",
    about="a value declared replicated (Replicate placement, plain parameter) differs between ranks of its group",
    majority=True,
)

WHAT_TEXT = {
    "output": "forward output of",
    "grad_input": "input gradient of",
    "grad": "gradient of",
    "param": "parameter",
    "loss": "loss",
    "grad_norm": "gradient norm",
}


def check(trace: Trace, tol: Tolerance | None = None) -> Checked:
    tol = tol or Tolerance()
    out = Checked()
    if trace.numerics is None or trace.replicas is None or trace.replicas.is_empty():
        return out
    digests = trace.numerics.select("step", "seq", "phase", "what", "name", "dtype", "numel", "order")
    rep = trace.replicas.join(digests, on=["step", "seq"], how="inner")
    # each rank against its group's majority value (healthy replicas are bit-identical)
    rep = rep.with_columns(
        _n=pl.len().over("step", "seq", "group", "sum", "sumsq", "amax"),
    )
    ref = (
        rep.sort("_n", "rank", descending=[True, False])
        .group_by("step", "seq", "group", maintain_order=True)
        .agg(
            r_sum=pl.col("sum").first(),
            r_sumsq=pl.col("sumsq").first(),
            r_amax=pl.col("amax").first(),
            majority=pl.col("_n").first(),
        )
    )
    rep = rep.join(ref, on=["step", "seq", "group"]).with_columns(
        err=rel_error("", "r_", "numel", tol.atol), rtol=tol.rtol_expr(pl.col("dtype"))
    )
    rep = rep.with_columns(
        bad=pl.col("err") > pl.col("rtol"),
        # no majority (every rank its own value): every member is a culprit
        off=(pl.col("err") > pl.col("rtol")) | (pl.col("majority") <= pl.col("members").list.len() // 2),
    )
    bad = rep.filter(pl.col("bad").any().over("step", "seq", "group"))
    if bad.is_empty():
        return out
    per_value = (
        bad.group_by("step", "seq", "group", maintain_order=True)
        .agg(
            pl.col("phase").first(),
            pl.col("what").first(),
            pl.col("name").first(),
            pl.col("dtype").first(),
            pl.col("order").first(),
            pl.col("members").first(),
            culprits=pl.col("rank").filter(pl.col("off")),
            err=pl.col("err").max(),
            rtol=pl.col("rtol").first(),
            diff=(pl.col("sum") - pl.col("r_sum")).abs().max(),
        )
        .sort("order", "group")
    )
    first = per_value.group_by("what", "name", maintain_order=True).agg(pl.all().first()).sort("order")
    root_step = int(first["step"].min())  # type: ignore[arg-type]  # a non-empty integer column
    roots = first.filter(pl.col("step") == root_step)
    roots = roots.with_columns(_p=pl.col("phase").replace_strict(PHASE_ORDER, default=3, return_dtype=pl.Int64))
    root_phase = roots["_p"].min()
    later = first.height - roots.filter(pl.col("_p") == root_phase).height
    for row in roots.filter(pl.col("_p") == root_phase).iter_rows(named=True):
        out.findings.append(_finding(row, trace))
    if later:
        out.notes.append(
            f"{later} more value(s) diverge between replicas after step {root_step} {str(roots['phase'].to_list()[0])} "
            "(consequences of the first)"
        )
    return out


def _finding(row: dict, trace: Trace) -> Finding:
    members, culprits = list(row["members"]), sorted(row["culprits"])
    label = _group_label(trace, members)
    what = WHAT_TEXT.get(row["what"], row["what"])
    message = (
        f"{what} {row['name']} differs between replicas on {label} (ranks {ranks_text(members)}) "
        f"at step {row['step']} {row['phase']}: relative difference {row['err']:.3g} > tolerance {row['rtol']:.3g} "
        f"({row['dtype']}); ranks {ranks_text(culprits)} hold other values"
    )
    return Finding(
        kind=REPLICA_DIVERGENCE,
        message=message,
        ranks=members,
        culprit_ranks=culprits,
        group={"name": label, "label": label, "ranks": members},
        module=row["name"],
        step=int(row["step"]),
        phase=row["phase"],
        numerics={
            "what": row["what"],
            "dtype": row["dtype"],
            "rel_error": float(row["err"]),
            "tolerance": float(row["rtol"]),
            "max_abs_sum_difference": float(row["diff"]),
        },
    )


def _group_label(trace: Trace, members: list[int]) -> str:
    """The recorded group with exactly these members (its mesh dim label), else the rank list."""
    if len(members) == trace.world_size:
        match = trace.groups.filter(pl.col("size") == len(members))
    else:
        match = trace.groups.filter(pl.col("ranks").list.sort() == pl.lit(sorted(members), dtype=pl.List(pl.Int32)))
    labels = [x for x in match["label"].to_list() if x] if match.height else []
    return labels[0] if labels else ("world" if len(members) == trace.world_size else f"ranks {ranks_text(members)}")
