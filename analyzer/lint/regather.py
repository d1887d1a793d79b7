"""A parameter all-gathered more often per step than the layout needs.

FSDP2 all-gathers a unit's parameters once per forward, and with reshard_after_forward (its
default, TorchTitan's but for the root and under pipeline parallelism) once more in backward: a
backward gather per forward is the layout's price. Activation checkpointing wrapped outside the
unit can add one per forward (the recompute). Anything beyond that (a unit resharded and
gathered again within one backward, an explicit unshard) moves the same parameters twice.

Per rank, step and unit (the module FSDP attributes its all-gathers to): forward gathers f
(the phase forward or other: a pipeline schedule runs stages outside any module), backward
gathers b; advice when b > f (b > 2 f when the header's config turns activation checkpointing
on, or a TorchTitan recording does not say)."""

from __future__ import annotations

import polars as pl

from analyzer.lint.common import advice, config, priced, summarize, time_text, where
from analyzer.lint.options import Linted, LintOptions
from analyzer.model.findings import ADVICE, Kind
from analyzer.model.trace import Trace

REPEATED_GATHER = Kind(
    name="repeated_param_gather",
    about="a parameter all-gathered more often per step than the layout needs",
    severity=ADVICE,
)


def checkpointing(trace: Trace) -> bool:
    """Whether activation checkpointing may recompute forwards in backward (the header's config;
    a TorchTitan run that does not override it: its config file decides, so maybe)."""
    c = config(trace)
    ac = c.get("activation_checkpoint")
    if isinstance(ac, dict):
        return str(ac.get("mode", "none")) != "none"
    titan = c.get("torchtitan")
    if isinstance(titan, dict):
        over = [str(x) for x in titan.get("overrides") or []]
        for i, arg in enumerate(over):
            if arg.lstrip("-").partition("=")[0] == "activation_checkpoint.mode":
                value = arg.partition("=")[2] or (over[i + 1] if i + 1 < len(over) else "")
                return value != "none"
        return True
    return False


def lint(trace: Trace, options: LintOptions, comm: pl.DataFrame) -> Linted:
    out = Linted()
    ac = checkpointing(trace)
    gathers = comm.filter(
        pl.col("fsdp") & pl.col("op").is_in(["all_gather_into_tensor", "all_gather_into_tensor_coalesced"])
    )
    keys = ["rank", "step", "group", "module"]
    per = gathers.group_by(keys).agg(
        f=(pl.col("phase") != "backward").sum(), b=(pl.col("phase") == "backward").sum(), n=pl.len()
    )
    allowed = pl.col("f") * (2 if ac else 1)
    per = per.filter(pl.col("b") > allowed).with_columns(excess=(pl.col("b") - allowed) / pl.col("n"))
    rows = gathers.join(per, on=keys)
    rows = priced(rows, options).with_columns(seconds=pl.col("seconds") * pl.col("excess"))  # the extra gathers' share
    for r in summarize(rows, ["label", "module"]):
        worst = (
            per.filter(pl.col("module").cast(pl.String).eq_missing(r["module"]))
            .sort("n", descending=True)
            .row(0, named=True)
        )
        out.findings.append(
            advice(
                REPEATED_GATHER,
                trace,
                r,
                f"{r['module'] or 'the root'}'s parameters are all-gathered {worst['n']} times per step on "
                f"{r['label']} ({worst['f']} outside backward, {worst['b']} in backward), {where(r)}"
                f"{time_text(r['seconds'], 'in the extra gathers')}: the layout needs one per forward, "
                "plus one in backward per forward with reshard_after_forward"
                + (" and one more under activation checkpointing" if ac else "")
                + "; look for a reshard or unshard inside backward, or a unit used twice",
            )
        )
    return out
