"""How far a rank got: its last recorded comm op, the op a `wait` waits on, and (given a golden
trace of the same config) what it should have run next. Read by the causes of a hang
(checks/p2p_cause.py, checks/stalled_rank.py) and by `analyzer hang`'s tables."""

from __future__ import annotations

import polars as pl

from analyzer.model.text import ranks_text
from analyzer.model.trace import Trace
from analyzer.waitfor.semantics import COMM, Blocked


def _comm_rows(trace: Trace, rank: int) -> pl.DataFrame:
    ops = [o for o in COMM if o != "wait"]
    return (
        trace.select(ops=ops, ranks=[rank])
        .with_columns(op=pl.col("op").cast(pl.String))
        .join(trace.groups.select("gid", "label", "ranks"), left_on="group", right_on="gid", how="left")
        .sort("idx")
    )


def _describe(row: dict) -> str:
    where = (row.get("frame") or "?") + (f" [{row['module']}]" if row.get("module") else "")
    group = f"{row['label']} (ranks {ranks_text(row['ranks'])})" if row.get("label") else "?"
    return f"{row['op']} #{row['seq']} on {group} at {where} ({row['phase']}, step {row['step']})"


def last_comm(trace: Trace, rank: int) -> str | None:
    rows = _comm_rows(trace, rank)
    return _describe(rows.row(-1, named=True)) if rows.height else None


def next_expected(trace: Trace, golden: Trace, rank: int, waited: tuple | None = None) -> dict | None:
    """What `rank` should have run next, from the golden pattern: the golden's op on the group
    (same members) and sequence number its peers wait in, when there is one; else placed by how
    many comm ops the rank got through (a Flight Recorder ring buffer may have lost the rest)."""
    if rank not in golden.ranks:
        return None
    ahead = _comm_rows(golden, rank)
    done = _comm_rows(trace, rank).height
    if waited is not None:
        members, seq = waited
        hit = ahead.with_row_index("i").filter((pl.col("seq") == seq) & (pl.col("ranks") == list(members)))
        if hit.height:
            done = int(hit["i"][0])
    if done >= ahead.height:
        return {"text": "nothing: the golden rank ends here too", "index": done}
    row = ahead.row(done, named=True)
    return {
        "text": _describe(row),
        "index": done,
        "op": row["op"],
        "seq": row["seq"],
        "group": row["label"],
        "module": row["module"],
        "frame": row["frame"],
        "phase": row["phase"],
        "step": row["step"],
    }


def waited_ops(trace: Trace, stuck: dict[int, Blocked], ranks: list[int]) -> dict[int, str]:
    """For stuck ranks blocked at a `wait`: the op it waits on (one select, any count)."""
    refs = [(r, stuck[r].event["ref"]) for r in ranks if r in stuck and stuck[r].event["op"] == "wait"]
    if not refs:
        return {}
    want = pl.DataFrame(refs, schema={"rank": pl.Int32, "idx": pl.Int32}, orient="row")
    ops = trace.select("rank", "idx", "op", ranks=sorted({r for r, _ in refs}))
    return {r: str(op) for r, _, op in want.join(ops, on=["rank", "idx"], how="inner").iter_rows()}
