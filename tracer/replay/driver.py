"""`tracer replay`: re-issue a recorded comm pattern on a real backend (gloo on CPU), no model.

One process per recorded rank joins a real process group, recreates the recorded groups in
each rank's recorded creation order and issues the rank's events in order with zero tensors of
the recorded shapes and dtypes (tracer/replay/ops.py). The replay is itself recorded, mode
"replay": a replay killed at its timeout leaves streams that end where each rank was stuck,
which `analyzer hang` reads with post-mortem semantics.

Planning (what each rank issues) is pure and torch-free; only the worker processes import torch.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import signal
import socket
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from typing import Any

from traceformat import format as fmt
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader
from traceformat.ops import COLLECTIVE_OPS, COMM_OPS, GROUP_OPS, P2P_OPS
from traceformat.output import parts_folder

STARTUP_S = 120.0  # at most this long for the ranks to start and join, on top of --timeout
_COMM = COMM_OPS
_PLAN_COLS = ("group", "peer", "tag", "in_bytes", "out_bytes", "async_op", "step", "ref", "batch")
_PLAN_ATOMS = ("op", "dtype", "in_shapes", "out_shapes", "reduce_op", "splits", "info", "module", "phase", "frame")


class ReplayError(ValueError):
    """The trace cannot be replayed as asked (one-line message)."""


@dataclass
class Plan:
    world_size: int
    groups: dict[int, dict]
    events: dict[int, list[dict]]
    """Per rank: group creations and comm events to issue, in recorded order."""
    notes: list[str] = field(default_factory=list)


@dataclass
class ReplayResult:
    out: str
    hung: bool
    seconds: float
    errors: dict[int, str] = field(default_factory=dict)
    stats: list[dict] = field(default_factory=list)
    """Per (op, group): calls, seconds, bytes, algbw (bytes / s), over all ranks."""
    pids: list[int] = field(default_factory=list)


# ---- planning (pure) ------------------------------------------------------------------------
def rank_events(data: fmt.TraceData, rank: int) -> list[dict]:
    """A rank's recorded events as dicts with atoms resolved; idx is the recorded position."""
    raw = data.columns.get(rank)
    if raw is None:
        return []
    atoms = data.atoms
    cols = {name: raw[name] for name in (*_PLAN_COLS, *_PLAN_ATOMS)}  # expanded once
    out = []
    for i in range(len(cols["op"])):
        ev: dict[str, Any] = {name: int(cols[name][i]) for name in _PLAN_COLS}
        for name in _PLAN_ATOMS:
            a = int(cols[name][i])
            ev[name] = atoms[a] if a >= 0 else None
        ev["idx"] = i
        out.append(ev)
    return out


def plan(data: fmt.TraceData, *, steps: int | None = None, prefix: bool = False) -> Plan:
    """What each rank issues. A trace with missing ranks or unfinished streams is refused
    (ReplayError) unless `prefix`: then every rank replays only the common prefix, the longest
    stretch in which every collective and p2p op still has all its partners."""
    world = data.header["world_size"]
    streams = {r: rank_events(data, r) for r in range(world)}
    missing = [r for r in range(world) if r not in data.columns and r not in data.header.get("ranks", [])]
    unfinished = [r for r in range(world) if r not in missing and data.ends.get(r, {}).get("status") != "ok"]
    notes = []
    if missing or unfinished:
        what = "; ".join(
            x
            for x in (
                f"ranks {_ranks(missing)} missing" if missing else "",
                f"streams of ranks {_ranks(unfinished)} truncated" if unfinished else "",
            )
            if x
        )
        if not prefix:
            raise ReplayError(f"{what}: cannot replay a partial trace (--prefix replays the common prefix)")
        notes.append(f"{what}: replaying the common prefix")
        donor = next((r for r in range(world) if r not in missing), None)
        if donor is None:
            raise ReplayError("the trace holds no rank's events")
        for r in missing:  # a missing rank still has to take part in every group creation
            streams[r] = [dict(ev) for ev in streams[donor] if ev["op"] in ("init_process_group", "new_group")]
    keep = {
        r: [ev for ev in evs if ev["op"] in GROUP_OPS or (ev["op"] in _COMM and (steps is None or ev["step"] < steps))]
        for r, evs in streams.items()
    }
    for r, evs in keep.items():  # waits on the ops kept (a wait outside --steps would wait on nothing)
        kept = {ev["idx"] for ev in evs}
        waits = [ev for ev in streams[r] if ev["op"] == "wait" and ev["ref"] in kept]
        keep[r] = sorted(evs + waits, key=lambda ev: ev["idx"])
    if prefix:
        keep = common_prefix(keep, data.groups)
    return Plan(world, data.groups, keep, notes)


def common_prefix(streams: dict[int, list[dict]], groups: dict[int, dict]) -> dict[int, list[dict]]:
    """Cut each stream before its first event that cannot complete given the others' cuts: a
    group creation not made by every rank, a collective some member never reached, a send or
    recv without its partner. Cuts only shorten streams, so iterating reaches a fixpoint."""
    cut = {r: len(evs) for r, evs in streams.items()}
    while True:
        creations = min(
            sum(ev["op"] != "split_group" and ev["op"] in GROUP_OPS for ev in evs[: cut[r]])
            for r, evs in streams.items()
        )
        coll: Counter = Counter()
        p2p: Counter = Counter()
        for r, evs in streams.items():
            for ev in evs[: cut[r]]:
                if ev["op"] in COLLECTIVE_OPS:
                    coll[(ev["group"], r)] += 1
                elif ev["op"] in P2P_OPS:
                    p2p[(ev["op"], ev["group"], r, ev["peer"])] += 1
        changed = False
        for r, evs in streams.items():
            made, seen_c, seen_p = 0, Counter[int](), Counter[tuple]()
            for i, ev in enumerate(evs[: cut[r]]):
                op, g = ev["op"], ev["group"]
                if op in GROUP_OPS and op != "split_group":
                    made += 1
                    ok = made <= creations
                elif op in COLLECTIVE_OPS:
                    ok = all(coll[(g, m)] > seen_c[g] for m in groups[g]["ranks"])
                    seen_c[g] += 1
                elif op in P2P_OPS:
                    other = "recv" if op == "send" else "send"
                    ok = p2p[(other, g, ev["peer"], r)] > seen_p[(op, g, ev["peer"])]
                    seen_p[(op, g, ev["peer"])] += 1
                else:
                    ok = True
                if not ok:
                    cut[r], changed = i, True
                    break
        if not changed:
            break
    out = {}
    for r, evs in streams.items():  # drop waits whose op was cut
        kept = {ev["idx"] for ev in evs[: cut[r]]}
        out[r] = [ev for ev in evs[: cut[r]] if ev["op"] != "wait" or ev["ref"] in kept]
    return out


def _ranks(ranks: list[int]) -> str:
    return ",".join(map(str, ranks[:16])) + ("..." if len(ranks) > 16 else "")


def _group_label(g: dict) -> str:
    ranks = g.get("ranks", [])
    contiguous = ranks and ranks == list(range(ranks[0], ranks[-1] + 1))
    span = f"{ranks[0]}-{ranks[-1]}" if contiguous else ",".join(map(str, ranks))
    return f"{g.get('desc', '?')} [{span}]"


def summarize(stats: dict[int, list], groups: dict[int, dict]) -> list[dict]:
    """Per (op, group) over all ranks: calls, seconds, bytes and algorithm bandwidth."""
    acc: dict[tuple, list] = defaultdict(lambda: [0, 0.0, 0])
    for rows in stats.values():
        for op, gid, nbytes, secs in rows:
            a = acc[(op, gid)]
            a[0] += 1
            a[1] += secs
            a[2] += nbytes
    out = []
    for (op, gid), (calls, secs, nbytes) in sorted(acc.items(), key=lambda kv: -kv[1][1]):
        g = groups.get(gid, {})
        out.append(
            {
                "op": op,
                "group": _group_label(g),
                "calls": calls,
                "seconds": secs,
                "bytes": nbytes,
                "algbw": nbytes / secs if secs > 0 else 0.0,
            }
        )
    return out


# ---- running --------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(kwargs: dict, log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from tracer.replay.ops import replay_rank

    os._exit(replay_rank(**kwargs))


def _kill_all(procs: list) -> None:
    """SIGKILL every replay process and everything it started (each leads its own process
    group), all before reaping any: a rank that outlived its peer would record the closed
    connection as its own error instead of the op it was stuck in."""
    for proc in procs:
        for kill in (lambda proc=proc: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
            try:
                kill()
            except (ProcessLookupError, PermissionError, ValueError):
                pass
    for proc in procs:
        proc.join()


def replay(
    trace_path: str,
    *,
    out: str,
    timeout: float = 60.0,
    steps: int | None = None,
    prefix: bool = False,
    backend: str = "gloo",
) -> ReplayResult:
    if backend != "gloo":
        raise ReplayError(f"--backend {backend}: only gloo (CPU) is supported here")
    data = trace_reader.read_trace(trace_path)
    p = plan(data, steps=steps, prefix=prefix)
    parts_dir = parts_folder(out)  # a temp folder for -o /dev/null
    shutil.rmtree(parts_dir, ignore_errors=True)
    os.makedirs(parts_dir)
    init = f"tcp://127.0.0.1:{_free_port()}"
    config = {"replay_of": os.path.abspath(trace_path), "steps": steps, "prefix": prefix, "backend": backend}
    # spawn: a clean interpreter per rank (no forked torch or threads); the marker in the
    # environment lets a caller find any replay process of this output
    ctx = mp.get_context("spawn")
    resource_tracker.ensure_running()  # a helper outliving the ranks by design: started unmarked
    os.environ["COMMTRACE_REPLAY"] = os.path.abspath(out)
    procs = []
    start = time.perf_counter()
    try:
        for r in range(p.world_size):
            kwargs = dict(
                rank=r,
                world_size=p.world_size,
                init_method=init,
                plan=p.events[r],
                groups=p.groups,
                parts_dir=parts_dir,
                config=config,
                timeout_s=timeout,
            )
            proc = ctx.Process(target=_child, args=(kwargs, os.path.join(parts_dir, f"rank_{r:05d}.log")))
            proc.start()
            procs.append(proc)
        # the timeout counts from when every rank has joined the process group: starting an
        # interpreter and importing torch takes seconds that say nothing about the pattern
        deadline = time.monotonic() + timeout + STARTUP_S
        ready = False
        while any(pr.is_alive() for pr in procs) and time.monotonic() < deadline:
            mp.connection.wait([pr.sentinel for pr in procs if pr.is_alive()], timeout=0.1)
            if not ready and all(
                os.path.exists(os.path.join(parts_dir, f"ready_{r:05d}")) for r in range(p.world_size)
            ):
                ready, deadline = True, time.monotonic() + timeout
        hung = any(pr.is_alive() for pr in procs)
    finally:
        os.environ.pop("COMMTRACE_REPLAY", None)
        _kill_all(procs)
    result = ReplayResult(
        out=out, hung=hung, seconds=time.perf_counter() - start, pids=[pr.pid for pr in procs if pr.pid is not None]
    )
    parts = [trace_parts.part_path(parts_dir, r) for r in range(p.world_size)]
    present = [x for x in parts if os.path.exists(x)]
    if not present:
        raise ReplayError(f"no replay process started (logs in {parts_dir})")
    summary = trace_parts.merge(present, out, {"world_size": p.world_size, "mode": fmt.Mode.REPLAY.value})
    stats = {}
    for r in range(p.world_size):
        end = summary.ends.get(r)
        if end is None or end["status"] != "ok":
            why = (
                (end or {}).get("error")
                if (end or {}).get("status") == "error"
                else ("stuck, killed at the timeout" if hung else "exited before finishing")
            )
            result.errors[r] = f"rank {r}: {why} (log: {os.path.join(parts_dir, f'rank_{r:05d}.log')})"
        path = os.path.join(parts_dir, f"stats_{r:05d}.json")
        if os.path.exists(path):
            with open(path) as f:
                stats[r] = json.load(f)
    result.stats = summarize(stats, {g["gid"]: g for g in data.groups.values()})
    if not result.errors:
        shutil.rmtree(parts_dir, ignore_errors=True)
    return result
