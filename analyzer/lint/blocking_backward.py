"""A blocking collective in backward that FSDP could overlap.

A synchronous collective (async_op=False) issued from user code during backward (a gradient hook
all-reducing each gradient, say) stops the backward until it finishes: no gradient of the layers
below is computed meanwhile. FSDP2 (and DDP) issue their gradient reductions from autograd hooks
on a separate stream (CUDA) and overlap them with the rest of backward.

Not judged: FSDP2's own collectives (its all-gathers and reduce-scatters, HSDP's all-reduce after
a reduce-scatter; in a recording they read as synchronous since the stream is what overlaps
them), DTensor's (their waits are where the layout needs the data), and p2p (pipeline
schedules order those themselves)."""

from __future__ import annotations

import polars as pl

from analyzer.lint.common import advice, priced, summarize, time_text, where
from analyzer.lint.options import Linted, LintOptions
from analyzer.model.findings import ADVICE, Kind
from analyzer.model.trace import Trace

BLOCKING_BACKWARD = Kind(
    name="blocking_backward_collective",
    about="a blocking collective in backward that FSDP / DDP would overlap with the rest of backward",
    severity=ADVICE,
)


def lint(trace: Trace, options: LintOptions, comm: pl.DataFrame) -> Linted:
    rows = comm.filter(
        (pl.col("phase") == "backward")
        & (pl.col("async_op") == 0)
        & (pl.col("parent") < 0)
        & ~pl.col("fsdp")
        & (pl.col("op") != "barrier")
        & (pl.col("size") > 1)
    )
    rows = priced(rows, options)
    out = Linted()
    for r in summarize(rows, ["label", "op", "frame"]):
        out.findings.append(
            advice(
                BLOCKING_BACKWARD,
                trace,
                r,
                f"{r['per_step']} blocking {r['op']} per step on {r['label']} during backward, {where(r)}"
                f"{time_text(r['seconds'], 'that backward waits for')}: backward waits for each; "
                "let FSDP (fully_shard) or DDP reduce the gradients (they overlap with the rest of backward), "
                "or issue them with async_op=True and wait before the optimizer step",
            )
        )
    return out
