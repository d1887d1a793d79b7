"""The step-by-step Python replay of a dry run under blocking semantics (semantics.py): a dict
per event, so only the reference that the tests hold the columnar passes to (advance.py for any
trace, settle.py where the ordering certificate holds); the analyzer itself never runs it."""

from __future__ import annotations

from collections import deque

import polars as pl

from analyzer.trace import Trace
from analyzer.waitfor.semantics import _STREAM_COLUMNS, COMM, Blocked, group_members, op_key, waits_for


def comm_streams(trace: Trace, skip_groups: set[int] = frozenset()) -> dict[int, list[dict]]:
    """Per rank, its collectives, p2p ops and waits in program order (small traces: dicts)."""
    ev = (
        trace.select(*_STREAM_COLUMNS, ops=COMM)
        .with_columns(op=pl.col("op").cast(pl.String))
        .filter(~pl.col("group").is_in(sorted(skip_groups)))
    )
    out: dict[int, list[dict]] = {r: [] for r in trace.ranks}
    for row in ev.iter_rows(named=True):
        out[row["rank"]].append(row)
    return out


def simulate(trace: Trace, eager_bytes: int = 0, skip_groups: set[int] = frozenset()) -> dict[int, Blocked]:
    """Replay every rank's stream under blocking semantics; returns the ranks left blocked."""
    streams = comm_streams(trace, skip_groups)
    present = set(trace.ranks)
    size = {g["gid"]: len([r for r in g["ranks"] if r in present]) for g in trace.groups.iter_rows(named=True)}
    by_idx = {r: {e["idx"]: e for e in s} for r, s in streams.items()}
    arrived: dict[tuple, set] = {}
    posted: set[tuple] = set()
    waiters: dict[tuple, list[int]] = {}
    pc = {r: 0 for r in streams}
    entered = {r: -1 for r in streams}  # pc whose arrival / post is already counted
    blocked: dict[int, tuple[dict, tuple]] = {}
    ready = deque(streams)

    def done(key: tuple) -> bool:
        if key[0] == "c":
            return len(arrived.get(key, ())) >= size.get(key[1], 0)
        partner = ("r",) + key[1:] if key[0] == "s" else ("s",) + key[1:]
        return partner in posted

    def wake(key: tuple) -> None:
        for r in waiters.pop(key, []):
            blocked.pop(r, None)
            ready.append(r)

    while ready:
        r = ready.popleft()
        stream = streams[r]
        while pc[r] < len(stream):
            ev = stream[pc[r]]
            if ev["op"] == "wait":
                target = by_idx[r].get(ev["ref"])
                key = op_key(target, r) if target is not None else None
            else:
                key = op_key(ev, r)
                if entered[r] != pc[r]:
                    entered[r] = pc[r]
                    if key[0] == "c":
                        arrived.setdefault(key, set()).add(r)
                        if done(key):
                            wake(key)
                    else:
                        posted.add(key)
                        wake(("r",) + key[1:] if key[0] == "s" else ("s",) + key[1:])
                if ev["async_op"]:
                    pc[r] += 1
                    continue
                if key[0] == "s" and eager_bytes and ev["in_bytes"] <= eager_bytes:
                    pc[r] += 1
                    continue
            if key is None or done(key):
                pc[r] += 1
                continue
            blocked[r] = (ev, key)
            waiters.setdefault(key, []).append(r)
            break
    members = group_members(trace)
    issued: dict[tuple, int] = {}
    for r, stream in streams.items():
        for ev in stream:
            if ev["op"] != "wait":
                k = op_key(ev, r)
                issued[k] = issued.get(k, 0) + 1

    def matched(key: tuple) -> bool:
        if key[0] == "c":
            return issued.get(key, 0) >= size.get(key[1], 0)
        return (("r",) + key[1:] if key[0] == "s" else ("s",) + key[1:]) in issued

    return {
        r: Blocked(r, ev, key, waits_for(key, arrived.get(key, ()), members, present), matched(key))
        for r, (ev, key) in blocked.items()
    }
