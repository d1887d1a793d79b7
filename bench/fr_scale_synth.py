"""Synthetic NCCL Flight Recorder dumps at scale, byte for byte in the format torch 2.13 writes
them: the C++ pickler of `_dump_fr_trace` (protocol 2; every string memoised on first use and
referenced after; lists and dicts not memoised, except the frame dicts an entry shares with
earlier ones; `version` 2.10, every key FR writes, in its order), for a job that hangs.

    python bench/fr_scale_synth.py OUT_DIR --ranks 16384 [--entries 2000] [--kind realistic|simple]
        [--stall RANK] [--missing 3] [--truncated 0] [-j 2]

The job: dp x tp ranks (tp = 8), an FSDP x TP step per layer (all-gather on dp, two all-reduces
on tp, reduce-scatter on dp) -- or, `simple`, all-reduces on the world group from 4 call sites.
Each rank runs NCCL's semantics: it enqueues up to AHEAD collectives past the first one that has
not completed, a collective completes when every member enqueued it and completed its previous
one. The stalled rank never enqueues its all-reduce at op STALL_AT (stuck in compute); the rest
runs until nobody can move (a fixpoint over whole groups, numpy). Each rank's dump is the last
ENTRIES ops it enqueued (ring buffers wrap: record ids start past 0), `completed` / `started`
(its first open op) / `scheduled`. `--missing` ranks write no dump (their node died),
`--truncated` ranks a file cut in half. The truth (stalled rank, missing ranks) is printed and
written to OUT_DIR/../truth.json; torch-free.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import struct
import sys
import time
from multiprocessing import Pool

import numpy as np

TP = 8
AHEAD = 2  # collectives a rank enqueues past its first open one (NCCL: async on a stream)
FRAME_FILES = (
    "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
    "/usr/lib/python3.11/site-packages/torch/distributed/c10d_logger.py",
)
# per pattern op, profiling names as ProcessGroupNCCL.cpp writes them: (profiling name,
# group kind 0 world / 1 tp / 2 dp, size, how the sizes follow from it, api). "dp": a gather
# of `size` per member; "1/dp": a reduce-scatter to `size` per member (its input dp x size,
# as FSDP pads it: valid at every dp, not only at the powers of two that divide 8192)
REALISTIC = [
    ("nccl:_all_gather_base", 2, 1024, "dp", "all_gather_into_tensor"),
    ("nccl:all_reduce", 1, 2048, 1, "all_reduce"),
    ("nccl:all_reduce", 1, 2048, 1, "all_reduce"),
    ("nccl:_reduce_scatter_base", 2, 4, "1/dp", "reduce_scatter_tensor"),
]
SIMPLE = [("nccl:all_reduce", 0, 1024 * (k + 1), 1, "all_reduce") for k in range(4)]


class FRPickler:
    """What torch's C++ pickler writes for FR's dict of IValues (protocol 2)."""

    def __init__(self) -> None:
        self.out: list[bytes] = [b"\x80\x02"]
        self.memo: dict = {}

    def _put(self) -> None:
        i = len(self.memo) - 1
        self.out.append(b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i))

    def _get(self, i: int) -> None:
        self.out.append(b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i))

    def value(self, v) -> None:
        o = self.out
        if v is None:
            o.append(b"N")
        elif v is True:
            o.append(b"\x88")
        elif v is False:
            o.append(b"\x89")
        elif isinstance(v, int):
            if 0 <= v < 256:
                o.append(b"K" + bytes([v]))
            elif 0 <= v < 65536:
                o.append(b"M" + struct.pack("<H", v))
            elif -(2**31) <= v < 2**31:
                o.append(b"J" + struct.pack("<i", v))
            else:
                b = v.to_bytes(8, "little", signed=True)
                o.append(b"\x8a\x08" + b)
        elif isinstance(v, str):
            key = ("s", v)
            if key in self.memo:
                self._get(self.memo[key])
            else:
                b = v.encode()
                o.append(b"X" + struct.pack("<I", len(b)) + b)
                self.memo[key] = len(self.memo)
                self._put()
        elif isinstance(v, tuple) and len(v) == 2:
            self.value(v[0])
            self.value(v[1])
            o.append(b"\x86")
        elif isinstance(v, list):
            o.append(b"](")
            for x in v:
                self.value(x)
            o.append(b"e")
        elif isinstance(v, dict):
            self.dict(v)
        else:
            raise TypeError(type(v))

    def dict(self, d: dict, shared: object = None) -> None:
        """A dict; `shared`: a key under which the same dict is memoised (frame dicts)."""
        if shared is not None and ("d", shared) in self.memo:
            self._get(self.memo[("d", shared)])
            return
        self.out.append(b"}(")
        for k, v in d.items():
            self.value(k)
            self.value(v)
        self.out.append(b"u")
        if shared is not None:
            self.memo[("d", shared)] = len(self.memo)
            self._put()

    def finish(self) -> bytes:
        self.out.append(b".")
        return b"".join(self.out)


@functools.lru_cache(maxsize=2)
def _world_text(ranks: int) -> str:
    """pg_config's member list of the world group, as FR writes it (str of a list)."""
    return str(list(range(ranks)))


def layout(ranks: int, kind: str) -> tuple[list, np.ndarray]:
    """(pattern, group index of every rank per group kind: [3, ranks])."""
    r = np.arange(ranks)
    return (SIMPLE if kind == "simple" else REALISTIC), np.stack([np.zeros(ranks, dtype=np.int64), r // TP, r % TP])


def simulate(ranks: int, total: int, kind: str, stall: int, stall_at: int) -> tuple[np.ndarray, np.ndarray]:
    """(enqueued, completed) op counts per rank at the fixpoint."""
    pattern, gidx = layout(ranks, kind)
    kinds = np.array([p[1] for p in pattern])
    limit = np.full(ranks, total)
    if stall >= 0:
        limit[stall] = stall_at
    # until the stall every op completes everywhere: start there
    done = np.full(ranks, stall_at if stall >= 0 else total, dtype=np.int64)
    while True:
        issued = np.minimum(done + 1 + AHEAD, limit)
        ready = issued > done  # its next op is enqueued
        nxt = kinds[done % len(pattern)]
        moved = np.zeros(ranks, dtype=bool)
        for g in (0, 1, 2):
            mine = ready & (nxt == g) & (done < total)
            if not mine.any():
                continue
            key = gidx[g]
            n_groups = int(key.max()) + 1
            size = np.bincount(key, minlength=n_groups)
            ok = np.bincount(key[mine], minlength=n_groups) == size
            lo = np.full(n_groups, np.iinfo(np.int64).max)
            hi = np.full(n_groups, -1)
            np.minimum.at(lo, key, done)
            np.maximum.at(hi, key, done)
            ok &= lo == hi
            moved |= ok[key] & mine
        if not moved.any():
            return np.minimum(done + 1 + AHEAD, limit), done
        done = done + moved


def dump_bytes(rank: int, ranks: int, kind: str, entries: int, issued: int, done: int) -> bytes:
    pattern, gidx = layout(ranks, kind)
    dp = ranks // TP
    groups = [("0", "default_pg", 0)]
    if kind != "simple":
        groups += [(str(1 + int(gidx[1][rank])), "mesh_tp", 1), (str(1 + dp + int(gidx[2][rank])), "mesh_dp", 2)]
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": _world_text(ranks)}}
    if kind != "simple":
        t, d = int(gidx[1][rank]), int(gidx[2][rank])
        config[groups[1][0]] = {
            "name": groups[1][0],
            "desc": "mesh_tp",
            "ranks": str(list(range(t * TP, (t + 1) * TP))),
        }
        config[groups[2][0]] = {"name": groups[2][0], "desc": "mesh_dp", "ranks": str(list(range(d, ranks, TP)))}
    per_cycle = [sum(1 for p in pattern if p[1] == g) for g in range(3)]
    seq_before = [[sum(1 for p in pattern[:i] if p[1] == g) for i in range(len(pattern))] for g in range(3)]
    first = max(0, issued - entries)
    enq, comp, began = [0, 0, 0], [0, 0, 0], [0, 0, 0]
    p = FRPickler()
    p.out.append(b"}(")
    for k, v in (("version", "2.10"), ("pg_config", config), ("comm_lib_version", "2.26.6")):
        p.value(k)
        p.value(v)
    ents = []
    base = 1_765_000_000_000_000_000 + rank * 997
    for j in range(first, issued):
        name, g, size, factor, api = pattern[j % len(pattern)]
        seq = (j // len(pattern)) * per_cycle[g] + seq_before[g][j % len(pattern)] + 1
        enq[g] = seq
        comp[g] = seq if j < done else comp[g]
        began[g] = seq if j <= done else began[g]
        inp, out = (size * dp, size) if factor == "1/dp" else (size, size * dp if factor == "dp" else size)
        state = "completed" if j < done else ("started" if j == done else "scheduled")
        t = base + j * 1_000_000
        ents.append((j, g, seq, name, api, inp, out, state, t))
    status = {}
    for g, (_, _, pg_id) in enumerate(groups):
        status[str(pg_id)] = {
            "last_enqueued_collective": enq[g],
            "last_started_collective": began[g],
            "last_completed_collective": comp[g],
        }
    p.value("pg_status")
    p.value(status)
    p.value("entries")
    p.out.append(b"](")
    templates: dict = {}  # (site, state) -> the entry's bytes around its ints, once every string is memoised
    for j, g, seq, name, api, size, out, state, t in ents:
        pg_name, desc, pg_id = groups[g]
        site = j % len(pattern)
        tpl = templates.get((site, state))
        if tpl is not None:
            ints = (
                j,
                seq,
                seq,
                t,
                t + 1000 if state != "scheduled" else None,
                t + 5000 if state == "completed" else None,
            )
            a, b, c, d, e, f = map(_int, ints)
            p.out.append(b"".join((tpl[0], a, tpl[1], b, tpl[2], c, tpl[3], d, tpl[4], e, tpl[5], f, tpl[6])))
            continue
        mark, memo_before = len(p.out), len(p.memo)
        p.out.append(b"}(")
        p.value("frames")
        p.out.append(b"](")
        for f, (fname, file, line) in enumerate(
            (
                (api, FRAME_FILES[0], 3000 + site),
                ("wrapper", FRAME_FILES[1], 83),
                ("forward", "/home/user/train/model.py", 40 + 10 * site),
                ("main", "/home/user/train/train.py", 12),
            )
        ):
            p.dict({"name": fname, "filename": file, "line": line}, shared=(site, f))
        p.out.append(b"e")
        for k, v in (
            ("record_id", j),
            ("pg_id", pg_id),
            ("process_group", (pg_name, desc)),
            ("thread_name", "pt_main_thread"),
            ("thread_id", "140001"),
            ("collective_seq_id", seq),
            ("p2p_seq_id", 0),
            ("op_id", seq),
            ("profiling_name", name),
            ("time_created_ns", t),
            ("input_sizes", [[size]]),
            ("input_dtypes", ["BFloat16"]),
            ("output_sizes", [[out]]),
            ("output_dtypes", ["BFloat16"]),
            ("state", state),
            ("time_discovered_started_ns", t + 1000 if state != "scheduled" else None),
            ("time_discovered_completed_ns", t + 5000 if state == "completed" else None),
            ("retired", state == "completed"),
            ("timeout_ms", 600000),
            ("is_p2p", False),
        ):
            p.value(k)
            p.value(v)
            if k in INT_FIELDS:
                p.out.append(b"\0")  # where this entry's own int goes (cut out below)
        p.out.append(b"u")
        body = p.out[mark:]
        cuts = [i for i, x in enumerate(body) if x == b"\0"]
        for i in reversed(cuts):
            del body[i]
            del p.out[mark + i]
        # the template: the bytes between the ints, valid once the second entry of a kind reuses
        # only memoised strings (its first occurrence memoised them)
        if len(p.memo) == memo_before:
            tpl_parts, last = [], 0
            for n_cut, i in enumerate(cuts):
                i -= n_cut
                tpl_parts.append(b"".join(body[last : i - 1]))
                last = i
            tpl_parts.append(b"".join(body[last:]))
            templates[(site, state)] = tpl_parts
    p.out.append(b"eu")
    return p.finish()


INT_FIELDS = (
    "record_id",
    "collective_seq_id",
    "op_id",
    "time_created_ns",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
)


def _int(v) -> bytes:
    """FRPickler.value's bytes for an int >= 0 or None."""
    if v is None:
        return b"N"
    if v < 256:
        return b"K" + bytes((v,))
    if v < 65536:
        return b"M" + v.to_bytes(2, "little")
    if v < 2**31:
        return b"J" + v.to_bytes(4, "little")
    return b"\x8a\x08" + v.to_bytes(8, "little", signed=True)


def _write(args) -> int:
    out_dir, ranks, kind, entries, lo, hi, issued, done, truncated = args
    for r in range(lo, hi):
        if issued[r - lo] < 0:
            continue
        data = dump_bytes(r, ranks, kind, entries, int(issued[r - lo]), int(done[r - lo]))
        if r in truncated:
            data = data[: len(data) // 2]
        with open(os.path.join(out_dir, f"nccl_trace_rank_{r}"), "wb") as f:
            f.write(data)
    return hi - lo


def generate(
    out_dir: str,
    ranks: int,
    entries: int = 2000,
    kind: str = "realistic",
    stall: int | None = None,
    missing: int = 3,
    truncated: int = 0,
    jobs: int = 2,
    seed: int = 0,
) -> dict:
    """Writes the dumps; returns the truth: {stalled, stall_at, missing, truncated}."""
    rng = np.random.default_rng(seed)
    total = entries + 500
    stall = int(rng.integers(ranks)) if stall is None else stall
    stall_at = total - 300 - (total - 300) % 4 + (1 if kind != "simple" else 2)  # one of its tp all-reduces
    issued, done = simulate(ranks, total, kind, stall, stall_at)
    others = np.setdiff1d(
        np.arange(ranks),
        [stall] + ([] if kind == "simple" else list(range(stall - stall % TP, stall - stall % TP + TP))),
    )
    gone = sorted(int(x) for x in rng.choice(others, size=missing + truncated, replace=False))
    cut = set(gone[missing:])
    issued = issued.copy()
    issued[gone[:missing]] = -1
    os.makedirs(out_dir, exist_ok=True)
    step = max(1, ranks // (jobs * 8))
    tasks = [
        (out_dir, ranks, kind, entries, lo, min(ranks, lo + step), issued[lo : lo + step], done[lo : lo + step], cut)
        for lo in range(0, ranks, step)
    ]
    with Pool(jobs) as pool:
        sum(pool.imap_unordered(_write, tasks))
    return {"stalled": stall, "stall_at": stall_at, "missing": gone[:missing], "truncated": sorted(cut)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--kind", choices=("realistic", "simple"), default="realistic")
    ap.add_argument("--stall", type=int, default=None, help="the stalled rank (default: a seeded choice; -1: healthy)")
    ap.add_argument("--missing", type=int, default=3)
    ap.add_argument("--truncated", type=int, default=0)
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    t = time.perf_counter()
    truth = generate(a.out_dir, a.ranks, a.entries, a.kind, a.stall, a.missing, a.truncated, a.jobs)
    with open(os.path.join(os.path.dirname(os.path.abspath(a.out_dir)), "truth.json"), "w") as f:
        json.dump(truth, f)
    print(
        f"{a.ranks} dumps x {a.entries} entries in {a.out_dir} ({time.perf_counter() - t:.1f} s): {truth}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
