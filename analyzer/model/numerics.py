"""The numerics stream of a trace (`tracer record --mode local --numerics`) as two frames:
`digests`, one row per recorded value (the global digest), and `replicas`, one row per rank of a
value declared replicated. Built once at load from the format's records
(traceformat/numerics.py); empty frames for a trace without numerics."""

from __future__ import annotations

import polars as pl

PHASE_ORDER = {"forward": 0, "backward": 1, "optimizer": 2}
"""Execution order of the phases within a step."""

DIGEST_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "step": pl.Int64,
    "seq": pl.Int64,
    "phase": pl.String,
    "what": pl.String,
    "name": pl.String,
    "dtype": pl.String,
    "shape": pl.List(pl.Int64),
    "numel": pl.Int64,
    "sum": pl.Float64,
    "sumsq": pl.Float64,
    "amax": pl.Float64,
    "layout": pl.String,
    "occ": pl.Int64,
    "order": pl.Int64,
}
"""`seq`: position within the step's record(s); `occ`: how many times the same (step, what,
name) came before (a module called twice per step); `order`: execution order over the whole
trace (step, then phase, then seq)."""

REPLICA_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "step": pl.Int64,
    "seq": pl.Int64,
    "group": pl.Int64,
    "members": pl.List(pl.Int64),
    "rank": pl.Int64,
    "sum": pl.Float64,
    "sumsq": pl.Float64,
    "amax": pl.Float64,
}


_PER_RANK = pl.Struct(
    {
        "rank": pl.List(pl.Int64),
        "groups": pl.List(pl.List(pl.Int64)),
        "sum": pl.List(pl.Float64),
        "sumsq": pl.List(pl.Float64),
        "amax": pl.List(pl.Float64),
    }
)
"""A digest's `ranks` column: every rank's own digest, and the groups of ranks that must agree."""


def frames(records: list[dict]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(digests, replicas) of the numerics records, in file order (records of the same step,
    e.g. one per recording process, are concatenated in that order)."""
    schema = {k: v for k, v in DIGEST_SCHEMA.items() if k not in ("seq", "occ", "order")} | {"ranks": _PER_RANK}
    parts = [
        pl.DataFrame({**rec["c"], "step": [rec["step"]] * len(rec["c"]["name"])}, schema_overrides=schema, strict=False)
        for rec in records
    ]
    raw = pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame(schema=schema)
    raw = raw.select(list(schema)).cast(schema)  # type: ignore[arg-type]
    raw = raw.with_columns(seq=pl.int_range(pl.len()).over("step").cast(pl.Int64))
    digests = raw.drop("ranks").with_columns(
        occ=pl.int_range(pl.len()).over("step", "what", "name").cast(pl.Int64),
        _p=pl.col("phase").replace_strict(PHASE_ORDER, default=3, return_dtype=pl.Int64),
    )
    digests = digests.sort("step", "_p", "seq").with_columns(order=pl.int_range(pl.len()).cast(pl.Int64))
    digests = digests.select(list(DIGEST_SCHEMA))
    per = raw.select("step", "seq", "ranks").drop_nulls("ranks").unnest("ranks")
    values = per.select("step", "seq", "rank", "sum", "sumsq", "amax").explode("rank", "sum", "sumsq", "amax")
    members = (
        per.select("step", "seq", "groups")
        .with_columns(group=pl.int_ranges(pl.col("groups").list.len()))
        .explode("groups", "group")
        .drop_nulls("groups")
        .rename({"groups": "members"})
        .with_columns(rank=pl.col("members"))
        .explode("rank")
    )
    replicas = members.join(values, on=["step", "seq", "rank"], how="inner", maintain_order="left")
    return digests, replicas.select(list(REPLICA_SCHEMA)).cast(REPLICA_SCHEMA)  # type: ignore[arg-type]
