"""The step-by-step Python replay of a dry run under blocking semantics (semantics.py): a dict
per event, so only the reference that the tests hold the columnar passes to (advance.py for any
trace, settle.py where the ordering certificate holds); the analyzer itself never runs it."""

from __future__ import annotations

from collections import deque
from collections.abc import Set as AbstractSet

import polars as pl

from analyzer.model.trace import Trace
from analyzer.waitfor.semantics import _STREAM_COLUMNS, COMM, Blocked, WaitKey, group_members, waits_for


def comm_streams(trace: Trace, skip_groups: AbstractSet[int] = frozenset()) -> dict[int, list[dict]]:
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


def simulate(trace: Trace, eager_bytes: int = 0, skip_groups: AbstractSet[int] = frozenset()) -> dict[int, Blocked]:
    """Replay every rank's stream under blocking semantics; returns the ranks left blocked."""
    streams = comm_streams(trace, skip_groups)
    present = set(trace.ranks)
    size = {g["gid"]: len([r for r in g["ranks"] if r in present]) for g in trace.groups.iter_rows(named=True)}
    by_idx = {r: {e["idx"]: e for e in s} for r, s in streams.items()}
    arrived: dict[WaitKey, set] = {}
    posted: set[WaitKey] = set()
    waiters: dict[WaitKey, list[int]] = {}
    pc = {r: 0 for r in streams}
    entered = {r: -1 for r in streams}  # pc whose arrival / post is already counted
    blocked: dict[int, tuple[dict, WaitKey]] = {}
    ready = deque(streams)

    def done(key: WaitKey) -> bool:
        if key.collective:
            return len(arrived.get(key, ())) >= size.get(key.group, 0)
        return key.partner() in posted

    def wake(key: WaitKey) -> None:
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
                key = WaitKey.of(target, r) if target is not None else None
            else:
                key = WaitKey.of(ev, r)
                if entered[r] != pc[r]:
                    entered[r] = pc[r]
                    if key.collective:
                        arrived.setdefault(key, set()).add(r)
                        if done(key):
                            wake(key)
                    else:
                        posted.add(key)
                        wake(key.partner())
                if ev["async_op"]:
                    pc[r] += 1
                    continue
                if key.kind == "s" and eager_bytes and ev["in_bytes"] <= eager_bytes:
                    pc[r] += 1
                    continue
            if key is None or done(key):
                pc[r] += 1
                continue
            blocked[r] = (ev, key)
            waiters.setdefault(key, []).append(r)
            break
    members = group_members(trace)
    issued: dict[WaitKey, int] = {}
    for r, stream in streams.items():
        for ev in stream:
            if ev["op"] != "wait":
                k = WaitKey.of(ev, r)
                issued[k] = issued.get(k, 0) + 1

    def matched(key: WaitKey) -> bool:
        if key.collective:
            return issued.get(key, 0) >= size.get(key.group, 0)
        return key.partner() in issued

    return {
        r: Blocked(r, ev, key, waits_for(key, arrived.get(key, ()), members, present), matched(key))
        for r, (ev, key) in blocked.items()
    }
