"""Import a folder of PyTorch Flight Recorder (FR) dumps as a `Trace`: the same frames as a
commtrace trace, so every check and command runs on a production hang as on a dry run.

    >>> from analyzer import load
    >>> t = load("fr_dumps/")        # pickle or JSON dumps, one file per rank, any naming
    >>> t.events.filter(pl.col("state") != "completed")

Events get commtrace's columns (op in commtrace's vocabulary, group, seq from 0, peer, dtype,
shapes, bytes, frame = first user frame) plus two FR-only columns:
- `state` (String): "scheduled" / "started" / "completed" as FR knew it at dump time; gloo never
  updates an entry, so there an entry whose op_id is at most its group's
  `pg_status.last_completed_collective` counts as completed. Null in commtrace traces.
- `record_id` (Int64): FR's record id of the entry (position in its ring buffer's history).
- `fr_seq`, `fr_p2p_seq` (Int64): FR's own `collective_seq_id` (from 1) and `p2p_seq_id` of the
  entry, as the raw dump says; commtrace's `seq` counts from 0 per group (collectives) and per
  (group, src, dst) (p2p). Findings on dumps show both (analyzer.checks.fr_numbers).
Groups come from `pg_config`, or are inferred from the entries when it is empty (gloo): a
group's members are the ranks whose entries name it, the world is at least what the default
group's all-gathers show (`[group size, *input]`), so a rank that left no dump is still a
member, reported missing. How FR's conventions are mapped: analyzer.sources.flight_recorder.conventions.

Columnar where it counts: each dump is decoded to numpy columns by
analyzer.sources.flight_recorder.rank.read_rank (in worker processes when there are many:
load.py), and the rest is numpy over whole columns. This module turns decoded dumps into the
Trace; load.py decides where they are decoded.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import numpy as np

from analyzer.model.trace import LoadError, Trace, from_data
from analyzer.sources.flight_recorder import conventions as conv
from analyzer.sources.flight_recorder import window
from analyzer.sources.flight_recorder.groups import build_groups
from analyzer.sources.flight_recorder.options import ReadOptions
from analyzer.sources.flight_recorder.rank import RankDump, read_rank
from analyzer.sources.flight_recorder.window import Summary
from traceformat import codec
from traceformat import format as fmt


class _Atoms(fmt.AtomTable):
    """The format's atom table, as the importer feeds it: None is no atom (-1), shapes come as
    tuples of tuples (the atom is a list of lists)."""

    def get(self, value) -> int:
        return -1 if value is None else self.intern(value)

    def shape(self, key: tuple) -> int:
        return self.intern([list(s) for s in key])


def read_one(file_kind: tuple[str, str]) -> tuple[RankDump, Summary | None]:
    """One dump decoded, its p2p numbered on the whole dump, and its Summary (a worker's job)."""
    d = read_rank(file_kind)
    if d.error or d.rank is None:
        return d, None
    window.number_p2p(d)
    return d, window.summarize(d)


def accept(d: RankDump, dumps: dict, notes: list, single: bool) -> bool:
    """Keeps a decoded dump under its rank, or notes why not (raises where a dump is refused)."""
    name = os.path.basename(d.file)
    if d.error:
        if single or d.refused:
            raise LoadError(d.error)
        notes.append(f"skipped {d.error}")
    elif d.rank is None:
        notes.append(f"skipped {name}: no rank in the dump or its name")
    elif d.rank in dumps:
        notes.append(f"rank {d.rank}: more than one dump, kept the first ({name} ignored)")
    else:
        dumps[d.rank] = d
        return True
    return False


def resolve(summaries: dict[int, Summary]) -> tuple:
    """Groups of the dump set from the summaries alone: (pg key ids, groups, gid per rank and
    global pg key id, world, notes, gid per rank and local pg id)."""
    if not summaries:
        raise LoadError("no readable Flight Recorder dump")
    pgs: dict[tuple, int] = {}
    local: dict[int, list[int]] = {}
    hints: dict[int, int] = defaultdict(int)
    for r, s in sorted(summaries.items()):
        local[r] = [pgs.setdefault(k, len(pgs)) for k in s.pgs]
        for pg, hint in s.hints.items():
            hints[local[r][pg]] = max(hints[local[r][pg]], hint)
    used = {r: [local[r][pg] for pg in s.used] for r, s in summaries.items()}
    configs = {r: s.config for r, s in summaries.items()}
    groups, gid_of, world, notes = build_groups(used, configs, pgs, hints)
    by_local = {r: {i: gid_of[r].get(g, -1) for i, g in enumerate(local[r])} for r in summaries}
    return pgs, groups, gid_of, world, notes, by_local


def assemble(path: str, dumps: dict, summaries: dict, notes: list, kind: str, options: ReadOptions) -> Trace:
    """The Trace of the decoded dumps: each rank's whole history, or with options.frontier the
    windows held.reduce cut from each group's frontier on where the dumps were decoded. Takes
    `dumps` and `summaries` apart as it goes (they are emptied: at 100,000 ranks the driver's
    peak is what is held at once)."""
    if not dumps:
        raise LoadError(f"{path}: no readable Flight Recorder dump" + (f" ({notes[0]})" if notes else ""))
    pgs, groups, gid_of, world, group_notes, by_local = resolve(summaries)
    notes.extend(group_notes)
    if options.frontier:
        before = sum(s.n for s in summaries.values())
        after = sum(window.rows(d) for d in dumps.values())
        notes.append(
            f"hang: read from each group's frontier on ({options.context} instances of history; "
            f"{after:,} of {before:,} entries); `analyzer check` reads every rank's whole history"
        )
    summaries.clear()
    atoms = _Atoms()
    versions = {d.version for d in dumps.values()}
    # each window dropped as it is globalized, each rank's columns as they are concatenated
    # (_trace): 100,000 ranks' small arrays are mostly object headers, held once, not twice
    ranks = {r: _globalize(window.unpack(dumps.pop(r)), atoms, pgs) for r in sorted(dumps)}
    _finish_columns(ranks, gid_of, groups, atoms, notes)
    return _trace(path, ranks, groups, atoms, world, versions, kind, notes)


def _globalize(d: RankDump, atoms: _Atoms, pgs: dict) -> dict:
    """A worker's local table ids -> the shared atom / process-group ids (numpy gathers)."""
    c = d.cols
    site = np.array(
        [[atoms.get(op), atoms.get(frame), peer] for op, frame, peer, _ in d.sites] or [[-1, -1, -1]], dtype=np.int64
    )[c["site"]]
    backend = np.array([b for _, _, _, b in d.sites] + [""], dtype=object)[c["site"]]
    shapes = np.array([atoms.shape(s) for s in d.shapes] + [-1], dtype=np.int32)
    for key in d.pgs:
        pgs.setdefault(key, len(pgs))
    return {
        "op": site[:, 0].astype(np.int32),
        "frame": site[:, 1].astype(np.int32),
        "peer_local": site[:, 2],
        "backend": backend,
        "pg": np.array([pgs[k] for k in d.pgs] + [-1], dtype=np.int64)[c["pg"]],
        "seq": c["seq"],
        "in_shapes": shapes[c["in_shapes"]],
        "out_shapes": shapes[c["out_shapes"]],
        "dtype": np.array([atoms.get(t) for t in d.dtypes] + [-1], dtype=np.int32)[c["dtype"]],
        "state": np.array(d.states + [None], dtype=object)[c["state"]],
        "ts_ns": c["ts_ns"],
        "record_id": c["record_id"],
        "fr_seq": c["fr_seq"],
        "fr_p2p_seq": c["fr_p2p_seq"],
        "p2p_num": c["p2p_num"],
    }


def kind_of(files: list) -> str:
    return "+".join(sorted({k for _, k in files}))


def _finish_columns(ranks: dict, gid_of: dict, groups: dict, atoms: _Atoms, notes: list) -> None:
    """Per rank: pg key -> gid, group-rank peers -> global ranks, commtrace output conventions,
    p2p numbering per (group, peer), and a common start when ring buffers wrapped."""
    members = {gid: np.array(g["ranks"], dtype=np.int64) for gid, g in groups.items()}
    size = {gid: len(g["ranks"]) for gid, g in groups.items()}
    derived: dict = {}
    for rank, c in ranks.items():
        table = gid_of[rank]
        top = int(c["pg"].max()) + 1 if len(c["pg"]) else 0
        lut = np.full(top + 1, -1, dtype=np.int32)  # global pg key id -> gid (a few per rank)
        for p, g in table.items():
            if p < top:
                lut[p] = g
        c["group"] = lut[c["pg"]]
        peer = np.full(len(c["pg"]), -1, dtype=np.int32)
        for gid in np.unique(c["group"][c["peer_local"] >= 0]):
            m = (c["group"] == gid) & (c["peer_local"] >= 0) & (c["peer_local"] < len(members[gid]))
            peer[m] = members[gid][c["peer_local"][m]]
        c["peer"] = peer
        _derive_outputs(c, size, atoms, derived)
        _number_p2p(c, atoms)
    _common_start(ranks, notes)


def _derive_outputs(c: dict, size: dict, atoms: _Atoms, cache: dict) -> None:
    gloo = c["backend"] == "gloo"
    if not gloo.any():
        return
    keys = np.stack([c["op"], c["in_shapes"], c["group"]], axis=1)[gloo]
    if not len(keys):
        return
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    new = np.empty(len(uniq), dtype=np.int32)
    for i, (op, ins, gid) in enumerate(uniq.tolist()):
        key = (op, ins, gid)
        if key not in cache:
            out = conv.derive_outputs(atoms.values[op], atoms.values[ins] if ins >= 0 else [], size.get(gid, 0))
            cache[key] = atoms.shape(tuple(map(tuple, out))) if out is not None else None
        new[i] = -2 if cache[key] is None else cache[key]
    outs = c["out_shapes"].copy()
    sub = outs[gloo]
    replace = new[inverse.reshape(-1)]
    sub = np.where(replace == -2, sub, replace)
    outs[gloo] = sub
    c["out_shapes"] = outs.astype(np.int32)


def _number_p2p(c: dict, atoms: _Atoms) -> None:
    """commtrace numbers p2p per (group, src, dst) on both sides, FR per group and rank: the
    numbers window.number_p2p gave each send / recv on its whole dump."""
    mask = c["p2p_num"] >= 0
    if mask.any():
        seq = c["seq"].copy()
        seq[mask] = c["p2p_num"][mask]
        c["seq"] = seq


def _common_start(ranks: dict, notes: list) -> None:
    """Ring buffers that wrapped start at different collectives on different ranks: per group,
    keep what every rank still holds (FR's own reader aligns the same way)."""
    if not any(len(c["record_id"]) and c["record_id"][0] > 0 for c in ranks.values()):
        return
    start: dict[int, int] = defaultdict(int)
    for c in ranks.values():  # collectives only: p2p are numbered per peer pair from what is left
        coll = c["peer_local"] < 0
        for gid in np.unique(c["group"][coll]):
            start[int(gid)] = max(start[int(gid)], int(c["seq"][coll & (c["group"] == gid)].min()))
    lut = np.zeros(max(start, default=0) + 2, dtype=np.int64)  # gid -> first kept seq; -1 -> 0
    for gid, first in start.items():
        lut[gid] = first
    dropped = 0
    for c in ranks.values():
        keep = (c["seq"] >= lut[c["group"]]) | (c["peer_local"] >= 0)
        dropped += int((~keep).sum())
        for k, v in c.items():
            c[k] = v[keep]
    if dropped:
        notes.append(f"ring buffers wrapped: {dropped} older entries that not every rank still holds were left out")


def _trace(path, ranks: dict, groups: dict, atoms: _Atoms, world: int, versions: set, kind: str, notes: list) -> Trace:
    expected = sorted(set(range(world)))
    header = fmt.make_header(
        world_size=world,
        ranks=expected,
        mode=fmt.Mode.FLIGHT_RECORDER.value,
        config={"source": path, "ranks": expected, "fr_version": sorted(versions), "dump_format": kind},
        torch_version="",
    )
    t0 = min((int(c["ts_ns"].min()) for c in ranks.values() if len(c["ts_ns"])), default=0)
    numel = np.array(
        [sum(conv.numel(s) for s in v) if isinstance(v, list) else 0 for v in atoms.values] + [0], dtype=np.int64
    )  # per atom; index -1 is the trailing 0
    itemsize = np.array(
        [conv.ITEMSIZE.get(v.split("->")[0], 0) if isinstance(v, str) else 0 for v in atoms.values] + [0],
        dtype=np.int64,
    )
    order = sorted(ranks)
    counts = np.array([len(ranks[r]["op"]) for r in order], dtype=np.int64)

    def cat(name: str) -> np.ndarray:  # the last use of each column: taken out of the ranks
        return np.concatenate([ranks[r].pop(name) for r in order]) if order else np.zeros(0, dtype=np.int64)

    # every rank's columns at once (thousands of ranks of a few dozen entries each: per-rank
    # numpy calls would cost more than the entries), split into ranks by split_ranks
    total = int(counts.sum())
    row = {name: np.full(total, v, dtype=dt) for (name, dt), v in zip(fmt.COLUMNS, fmt.default_row())}
    for name in ("op", "group", "seq", "peer", "dtype", "in_shapes", "out_shapes", "frame"):
        row[name] = cat(name).astype(row[name].dtype)
    in_shapes, out_shapes, dtype = row["in_shapes"], row["out_shapes"], row["dtype"]
    row["in_bytes"] = numel[in_shapes] * itemsize[dtype]
    row["out_bytes"] = numel[out_shapes] * itemsize[dtype]
    row["ts"] = (cat("ts_ns") - t0) / 1e9
    extra: dict[str, Any] = {"state": cat("state").tolist()}
    for name in ("record_id", "fr_seq", "fr_p2p_seq"):
        extra[name] = cat(name)
    ranks.clear()
    columns = split_ranks(row, order, counts)
    data = fmt.TraceData(
        header=header,
        atoms=atoms.values,
        groups=groups,
        columns=columns,
        ends={r: {"n": int(n), "status": "ok", "error": None} for r, n in zip(order, counts.tolist())},
        complete=True,
    )
    notes = [
        f"Flight Recorder dumps ({kind}, FR version {', '.join(sorted(versions))}) of "
        f"{len(order)} rank{'s' if len(order) != 1 else ''}"
    ] + notes
    return from_data(data, notes, extra)


def split_ranks(row: dict, order: list[int], counts: np.ndarray) -> dict[int, codec.RankColumns]:
    """Every rank's events (`row`: the format's COLUMNS, ranks in `order` one after the other,
    `counts` events each) as each rank's pattern table and stream: what codec.split makes rank by
    rank, made at once. Patterns are numbered per rank in the order of their column values, so
    with the rank as the most significant part of one joint key every rank's patterns come out
    contiguous and numbered as codec.split numbers them."""
    total = int(counts.sum())
    starts = np.r_[0, np.cumsum(counts)][:-1]
    which = np.repeat(np.arange(len(order), dtype=np.int64), counts)
    idx = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)  # event index within its rank
    names = tuple(name for name, _ in fmt.COLUMNS)
    dt = dict(fmt.COLUMNS)
    pattern_cols = {}
    for name in names:
        if name in codec.STREAM_COLUMNS:
            continue
        col = np.asarray(row[name]).astype(np.int64)
        pattern_cols[name] = codec.events_back(idx, col) if name in codec.BACK_COLUMNS else col
    key, span = which, max(len(order), 1)
    for col in pattern_cols.values():
        if total == 0 or col.min() == col.max():
            continue
        uniq, inv = np.unique(col, return_inverse=True)
        if span * len(uniq) >= 1 << 62:  # keep the joint key in int64: re-factorise it (order kept)
            uniq_key, key = np.unique(key, return_inverse=True)
            key, span = key.reshape(-1), len(uniq_key)
        key = key * len(uniq) + inv.reshape(-1)
        span *= len(uniq)
    _, first, code = np.unique(key, return_index=True, return_inverse=True)
    code = code.reshape(-1)
    per_rank = np.bincount(which[first], minlength=len(order))
    code_at = np.r_[0, np.cumsum(per_rank)]
    patterns = {name: col[first].astype(dt[name]) for name, col in pattern_cols.items()}
    local = (code - code_at[which]).astype(np.int32)
    stream_cols = {name: np.asarray(row[name], dtype=dt[name]) for name in codec.STREAM_COLUMNS}
    out = {}
    for i, rank in enumerate(order):
        a, b = int(starts[i]), int(starts[i] + counts[i])
        k0, k1 = int(code_at[i]), int(code_at[i + 1])
        stream = {"code": local[a:b]}
        stream.update({name: v[a:b] for name, v in stream_cols.items()})
        out[rank] = codec.RankColumns({n: v[k0:k1] for n, v in patterns.items()}, stream, names)
    return out
