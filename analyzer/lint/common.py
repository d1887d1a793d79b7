"""What the lint rules share: the collectives frame (with who issued each: FSDP, DTensor, the
user), the groups' placement, the mixed-precision policy of the header, and one way to turn
per-event rows into advice (ranks, per-step counts, module, frame, time)."""

from __future__ import annotations

import polars as pl

from analyzer.checks.common import group_table
from analyzer.lint.options import LintOptions
from analyzer.model.findings import Finding, Kind
from analyzer.model.trace import Trace
from traceformat import ops

FSDP_OPS = ("all_gather_into_tensor", "reduce_scatter_tensor")
"""FSDP2 moves parameters and gradients with these only (one flat buffer per unit), plus HSDP's
all_reduce of the reduce-scattered shard over the replicate dim (see `collectives`)."""

COLUMNS = (
    "rank",
    "idx",
    "code",
    "op",
    "group",
    "seq",
    "step",
    "phase",
    "module",
    "frame",
    "dtype",
    "reduce_op",
    "in_bytes",
    "out_bytes",
    "async_op",
    "parent",
    "batch",
)

TIGHT_DIMS = frozenset({"tp", "cp", "ep", "etp"})
"""Mesh dims whose collectives are per layer and on the critical path (analyzer.lint.cross_node).
A flattened dim counts when every part is one of these (cp_tp), not when it mixes in a data
parallel dim (dp_shard_cp)."""

DTYPE_BYTES = {
    "float64": 8,
    "complex64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
}
"""Width of the floating dtypes a mixed-precision policy speaks of (integers are not judged)."""


def collectives(trace: Trace, options: LintOptions) -> pl.DataFrame:
    """Every collective of every rank (string columns categorical, module / frame null where
    none), plus:
    `fsdp` (issued by FSDP2: its all-gathers / reduce-scatters, which are never issued by a
    DTensor redistribute, and HSDP's all_reduce right after a reduce-scatter of the same unit),
    `size` and `nodes` (members of its group, nodes they span), `seconds` (null: `priced` fills it);
    `step` -1 for set-up (before the rank's first collective in forward or backward)."""
    e = trace.select(*COLUMNS, ops=sorted(ops.COLLECTIVE_OPS))
    # string columns stay categorical (a cast would build 80 M strings); rows are in stream order
    # (rank, then program order), so the previous collective of the same rank is a plain shift
    same_rank = pl.col("rank").shift(1) == pl.col("rank")
    prev_op, prev_module = (pl.when(same_rank).then(pl.col(c).shift(1)) for c in ("op", "module"))
    e = e.with_columns(
        fsdp=(pl.col("parent") < 0)
        & (
            pl.col("op").is_in(FSDP_OPS)
            | (
                (pl.col("op") == "all_reduce")
                & (prev_op == "reduce_scatter_tensor")
                & prev_module.eq_missing(pl.col("module"))
                & (pl.col("phase") == "backward")
            )
        ).fill_null(False)
    )
    # set-up (a model's parameters broadcast or scattered before training) is in no step: its
    # collectives, before the rank's first collective in forward or backward, get step -1
    started = pl.col("idx").filter(pl.col("phase").is_in(["forward", "backward"])).min().over("rank")
    e = e.with_columns(step=pl.when(pl.col("idx") < started.fill_null(-1)).then(-1).otherwise(pl.col("step")))
    e = e.join(group_places(trace, options), left_on="group", right_on="gid", how="left")
    return e.with_columns(seconds=pl.lit(None, dtype=pl.Float64))


def priced(rows: pl.DataFrame, options: LintOptions) -> pl.DataFrame:
    """`rows` (of `collectives`) with their `seconds` on the cluster (null without one): priced
    once a rule has kept them, not for every collective of the trace."""
    if options.cost is None or rows.is_empty():
        return rows
    return rows.with_columns(seconds=options.cost(rows))


def group_places(trace: Trace, options: LintOptions) -> pl.DataFrame:
    """gid, label, tight (a tp / cp / ep dim), size, nodes (how many nodes its members span under
    the placement), per_node (the most members on one node)."""
    g = trace.groups.select("gid", "label", "size", "ranks").explode("ranks").drop_nulls("ranks")
    g = g.with_columns(node=options.placement.node(pl.col("ranks")))
    per = g.group_by("gid", "node").agg(pl.col("label").first(), pl.col("size").first(), k=pl.len())
    return per.group_by("gid").agg(
        pl.col("label").first(),
        pl.col("size").first().cast(pl.Int64),
        tight=pl.col("label").first().str.split("_").list.eval(pl.element().is_in(list(TIGHT_DIMS))).list.all(),
        nodes=pl.len().cast(pl.Int64),
        per_node=pl.col("k").max().cast(pl.Int64),
    )


def config(trace: Trace) -> dict:
    """The header's config snapshot ({} where none: an untrusted header is input)."""
    c = trace.header.get("config")
    return c if isinstance(c, dict) else {}


def common_module(modules: list[str]) -> str:
    """The innermost module that holds all of them ("" the root); FSDP units named "a, b" count
    as each of their modules."""
    names = [m for ms in modules for m in (str(ms).split(", ") if ms else [""])]
    if not names:
        return ""
    parts = [n.split(".") if n else [] for n in names]
    out: list[str] = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        out.append(level[0])
    return ".".join(out)


def summarize(rows: pl.DataFrame, keys: list[str]) -> list[dict]:
    """Per distinct `keys`: ranks, per_step (the most calls one rank makes in one step), bytes
    (the most bytes one rank moves in one step), seconds (the most time, None without a cost
    model), modules, frame / gid / seq of the first event (lowest rank, program order). `rows`
    are in stream order (rank, then program order): one group-by over them, the rest on its
    (much smaller) result."""
    if rows.is_empty():
        return []
    firsts = {k: pl.col(c).first() for k, c in (("gid", "group"), ("seq", "seq"), ("frame", "frame")) if k not in keys}
    per = rows.group_by([*keys, "rank", "step"]).agg(
        n=pl.len(),
        bytes=pl.col("in_bytes").clip(0).sum(),
        seconds=pl.col("seconds").sum(),
        first=pl.col("idx").min(),
        modules=pl.col("module").unique(),
        **firsts,
    )
    out = (
        per.sort("rank", "first")
        .group_by(keys, maintain_order=True)
        .agg(
            ranks=pl.col("rank").unique().sort(),
            per_step=pl.col("n").max(),
            bytes=pl.col("bytes").max(),
            seconds=pl.col("seconds").max(),
            modules=pl.col("modules").list.explode(keep_nulls=True, empty_as_null=False).unique().sort(),
            **{k: pl.col(k).first() for k in firsts},
        )
    )
    out = out.with_columns(pl.col(c).cast(pl.String) for c in out.columns if out.schema[c] == pl.Categorical)
    out = out.with_columns(pl.col("modules").cast(pl.List(pl.String)))
    has_cost = rows["seconds"].null_count() < rows.height
    return [dict(r, seconds=r["seconds"] if has_cost else None) for r in out.iter_rows(named=True)]


def advice(kind: Kind, trace: Trace, row: dict, message: str) -> Finding:
    """A finding from one `summarize` row."""
    groups = group_table(trace)
    gid = row.get("gid")
    seq = row.get("seq")
    return Finding(
        kind=kind,
        message=message,
        ranks=list(row["ranks"]),
        culprit_ranks=list(row["ranks"]),
        group=groups.get(gid) if gid is not None and gid >= 0 else None,
        seq=int(seq) if seq is not None and seq >= 0 else None,
        op=row.get("op"),
        module=common_module(row.get("modules") or []),
        frame=row.get("frame") or None,
        per_step=row.get("per_step"),
        seconds_per_step=row.get("seconds"),
    )


def where(row: dict) -> str:
    """`under layers.0, first at file.py:12 in f` for messages."""
    modules = [m for m in row.get("modules") or [] if m]
    module = common_module(row.get("modules") or [])
    text = f"under {module}" if module else "in several modules" if modules else "outside any module"
    return text + (f", first at {row['frame']}" if row.get("frame") else "")


def time_text(seconds: float | None, what: str = "") -> str:
    """` (~1.2 ms of communication per step)` with a cost model; "" without."""
    if seconds is None:
        return ""
    return f" (~{seconds * 1e3:.3g} ms of communication per step{' ' + what if what else ''})"
