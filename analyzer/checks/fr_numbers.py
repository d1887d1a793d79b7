"""Which numbering a finding's `seq` is, and the dump's own numbers where the trace is Flight
Recorder dumps: a user looking for the entry in the raw dump searches FR's `collective_seq_id`
(from 1, per group) or `p2p_seq_id`, and its `record_id`, not commtrace's 0-based `seq`.

Every finding's JSON says `seq_numbering` ("commtrace": 0-based per group, p2p per (group, src,
dst)); on dumps a finding also gets `fr` = {"collective_seq_id" or "p2p_seq_id", "record_id":
{rank: id}} of the entries it is about, and its message ends with them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl

from analyzer.checks.common import group_table
from analyzer.model.findings import Finding
from analyzer.model.trace import Trace

NUMBERING = "commtrace: seq from 0 per group (p2p: per group, src, dst)"


def annotate(trace: Trace, found: list[Finding]) -> list[Finding]:
    """The findings with their numbering said, and on dumps the dump's own numbers (module doc)."""
    found = [f if f.seq_numbering is not None else replace(f, seq_numbering=NUMBERING) for f in found]
    if "fr_seq" not in trace.stream.columns:
        return found
    gid_of = {(g["name"], tuple(g["ranks"])): gid for gid, g in group_table(trace).items()}

    def gid(f: Finding):
        return gid_of.get((f.group["name"], tuple(f.group["ranks"]))) if f.group and f.seq is not None else None

    want = [(gid(f), f.seq) for f in found if gid(f) is not None]
    if not want:
        return found
    keys = pl.DataFrame(want, schema={"group": pl.Int32, "seq": pl.Int64}, orient="row").unique()
    rows = (
        trace.select("rank", "op", "group", "seq", "peer", "fr_seq", "fr_p2p_seq", "record_id")
        .with_columns(pl.col("group").cast(pl.Int32), pl.col("seq").cast(pl.Int64))
        .join(keys, on=["group", "seq"])
    )
    by_key: dict[tuple, list[dict]] = {}
    for row in rows.to_dicts():
        by_key.setdefault((row["group"], row["seq"]), []).append(row)
    return [_with_dump_numbers(f, by_key.get((gid(f), f.seq), [])) if gid(f) is not None else f for f in found]


def _with_dump_numbers(f: Finding, hits: list[dict]) -> Finding:
    """`f` with `fr` and its message's tail, from the dump entries at its (group, seq)."""
    p2p = f.op in ("send", "recv", "send/recv")
    hits = [h for h in hits if (str(h["op"]) in ("send", "recv")) == p2p]
    if not hits:
        return f
    named = set(f.culprit_ranks) | set(f.ranks)
    mine = [h for h in hits if h["rank"] in named] or hits
    fr: dict[str, Any]
    if p2p:
        fr = {"p2p_seq_id": sorted({h["fr_p2p_seq"] for h in mine})}
    else:
        fr = {"collective_seq_id": sorted({h["fr_seq"] for h in mine})}
    fr["record_id"] = {h["rank"]: h["record_id"] for h in sorted(mine, key=lambda h: h["rank"])}
    name, ids = next(iter(fr.items()))
    rids = ", ".join(f"rank {r}: {i}" for r, i in list(fr["record_id"].items())[:8])
    return replace(
        f,
        fr=fr,
        message=f.message
        + (
            f" [dump numbers: FR {name} {'/'.join(map(str, ids))}; record_id {rids}"
            f"{' ...' if len(fr['record_id']) > 8 else ''}; #{f.seq} is commtrace's 0-based seq]"
        ),
    )
