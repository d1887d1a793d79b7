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


def frames(records: list[dict]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(digests, replicas) of the numerics records, in file order (records of the same step,
    e.g. one per recording process, are concatenated in that order)."""
    cols: dict[str, list] = {name: [] for name in DIGEST_SCHEMA if name not in ("occ", "order")}
    rep: dict[str, list] = {name: [] for name in REPLICA_SCHEMA}
    seqs: dict[int, int] = {}
    for rec in records:
        step, c = rec["step"], rec["c"]
        n = len(c["name"])
        start = seqs.get(step, 0)
        seqs[step] = start + n
        cols["step"] += [step] * n
        cols["seq"] += range(start, start + n)
        for name in ("phase", "what", "name", "dtype", "shape", "numel", "sum", "sumsq", "amax", "layout"):
            cols[name] += c[name]
        for i, per in enumerate(c["ranks"]):
            if per is None:
                continue
            at = {r: k for k, r in enumerate(per["rank"])}
            for g, members in enumerate(per["groups"]):
                for r in members:
                    k = at.get(r)
                    if k is None:
                        continue
                    rep["step"].append(step)
                    rep["seq"].append(start + i)
                    rep["group"].append(g)
                    rep["members"].append(members)
                    rep["rank"].append(r)
                    rep["sum"].append(per["sum"][k])
                    rep["sumsq"].append(per["sumsq"][k])
                    rep["amax"].append(per["amax"][k])
    schema = {k: v for k, v in DIGEST_SCHEMA.items() if k in cols}
    digests = pl.DataFrame(cols, schema=schema)
    digests = digests.with_columns(
        occ=pl.int_range(pl.len()).over("step", "what", "name").cast(pl.Int64),
        _p=pl.col("phase").replace_strict(PHASE_ORDER, default=3, return_dtype=pl.Int64),
    )
    digests = digests.sort("step", "_p", "seq").with_columns(order=pl.int_range(pl.len()).cast(pl.Int64)).drop("_p")
    replicas = pl.DataFrame(rep, schema=REPLICA_SCHEMA)
    return digests, replicas
