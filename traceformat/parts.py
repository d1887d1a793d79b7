"""Joining and rewriting traces: per-rank parts merged into one trace of column blocks (or
combined in memory), and decoded data written back as rows. Built on traceformat.format, which alone
knows the bytes; torch-free like it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from traceformat.codec import RankColumns, split
from traceformat.format import (
    ATOM_COLUMNS,
    COLUMN_NAMES,
    COLUMNS,
    Arena,
    AtomTable,
    TraceData,
    TraceFormatError,
    default_row,
)
from traceformat.output import atomic_path
from traceformat.reader import read_header, read_trace
from traceformat.workers import chunksize, cpu_count, pool
from traceformat.writer import TraceWriter

PARTS_GLOB = "rank_*.part"
"""The part files of a recording's parts folder (see part_path)."""


def part_path(parts_dir: str, rank: int) -> str:
    """Where rank `rank` of a recording streams its events: OUT.trace.parts/rank_NNNNN.part (the
    recorder writes it, rank sharing reads it back, merge joins the folder)."""
    return os.path.join(parts_dir, f"rank_{rank:05d}.part")


class _Tables:
    """One atom table and one group table for many parts: remaps each part's local ids."""

    def __init__(self, writer: TraceWriter | None = None):
        self.writer = writer
        self._atoms = AtomTable()
        self.groups: dict[int, dict] = {}
        self._group_ids: dict[tuple, int] = {}

    @property
    def atoms(self) -> list:
        return self._atoms.values

    def _atom(self, value: Any) -> int:
        return self.writer.atom(value) if self.writer is not None else self._atoms.intern(value)

    def remap(self, data: TraceData) -> dict[int, RankColumns]:
        gmap = np.full(max(data.groups, default=-1) + 2, -1, dtype=np.int32)
        for gid, g in data.groups.items():
            key = (g["name"], tuple(g["ranks"]), g["desc"])
            if key not in self._group_ids:
                new = self._group_ids[key] = len(self._group_ids)
                self.groups[new] = dict(g, gid=new)
                if self.writer is not None:
                    self.writer.group(new, g["name"], g["ranks"], g["desc"])
            gmap[gid] = self._group_ids[key]
        amap = np.array([self._atom(a) for a in data.atoms] + [-1], dtype=np.int32)
        out = {}
        for rank, raw in data.columns.items():
            cols = split(raw, COLUMNS)
            pat = dict(cols.patterns)  # ids live in the pattern table only: remapping is cheap
            for name in ATOM_COLUMNS:
                pat[name] = amap[pat[name]]  # -1 indexes the trailing -1
            if len(pat["group"]) and pat["group"].max() >= len(gmap) - 1:
                raise TraceFormatError(f"rank {rank}: event refers to a missing group")
            pat["group"] = gmap[pat["group"]]
            out[rank] = RankColumns(pat, cols.stream, COLUMN_NAMES)
        return out


def _rank_end(data: TraceData, rank: int) -> dict:
    return data.ends.get(rank) or {
        "n": len(data.columns.get(rank, {}).get("op", ())),
        "status": "truncated",
        "error": "recording stopped before this rank finished",
    }


def merge(
    parts: Iterable[str | os.PathLike | TraceData],
    out_path: str | os.PathLike,
    header_updates: dict | None = None,
    combine_numerics: Callable[[list[dict]], list[dict]] | None = None,
) -> TraceData:
    """Join per-rank parts (rows) into one trace of column blocks, remapping atoms and groups
    to one table. A part may be given decoded (a TraceData, e.g. one derived by relabelling:
    traceformat/relabel.py). Returns a summary TraceData (header, groups, ends, notes; no columns).
    combine_numerics: turns every part's rank numerics records (real mode) into numerics records."""
    parts = [p if isinstance(p, TraceData) else os.fspath(p) for p in parts]
    if not parts:
        raise TraceFormatError("no parts to merge")
    headers = [p.header if isinstance(p, TraceData) else read_header(p) for p in parts]
    header = dict(headers[0], part=False, ranks=sorted({r for h in headers for r in h.get("ranks", [])}))
    header.update(header_updates or {})
    summary = TraceData(header=header)
    rank_numerics: list[dict] = []
    with atomic_path(out_path) as tmp:  # a failed or interrupted merge leaves out_path as it was
        writer = TraceWriter(tmp, header)
        tables = _Tables(writer)
        try:
            for path in parts:
                data = path if isinstance(path, TraceData) else read_trace(path)
                summary.notes.extend(data.notes)
                for rank, cols in tables.remap(data).items():
                    writer.block(rank, cols)
                writer.numerics(data.numerics)
                rank_numerics.extend(data.rank_numerics)
                for rank in data.header.get("ranks", []):
                    end = summary.ends[rank] = _rank_end(data, rank)
                    writer.end(rank, end["n"], end["status"], end["error"], end.get("error_text"))
            if rank_numerics and combine_numerics is not None:
                writer.numerics(combine_numerics(rank_numerics))
            writer.footer()
            summary.groups = tables.groups
            summary.complete = True
        finally:
            writer.close()
    return summary


def combine(datas: list[TraceData]) -> TraceData:
    """Several decoded parts as one TraceData in memory (what loading a parts folder gives)."""
    if not datas:
        raise TraceFormatError("no parts to combine")
    tables = _Tables()
    header = dict(datas[0].header, part=False, ranks=sorted({r for d in datas for r in d.header.get("ranks", [])}))
    out = TraceData(header=header, complete=all(d.complete for d in datas))
    for d in datas:
        out.notes.extend(d.notes)
        out.numerics.extend(d.numerics)
        out.columns.update(tables.remap(d))
        for rank in d.header.get("ranks", []):
            out.ends[rank] = _rank_end(d, rank)
    out.atoms, out.groups = tables.atoms, tables.groups
    if not out.complete:
        out.truncated_at = next(d.truncated_at for d in datas if not d.complete)
    return out


PARALLEL_FROM = 8
"""Parts folders of at least this many files are decoded by a process pool."""


def read_many(paths: list[str], workers: int | None = None) -> list[TraceData]:
    """Decode many parts, in parallel processes when there are enough of them (msgpack rows
    decode in Python, one core each). Errors surface as the TraceFormatError of the first bad
    part, as a sequential read would give."""
    if workers is None:
        workers = cpu_count()
    if workers < 2 or len(paths) < PARALLEL_FROM:
        return [read_trace(p) for p in paths]
    from concurrent.futures.process import BrokenProcessPool

    try:
        with pool(workers) as p:
            return list(p.map(_read_detached, paths, chunksize=chunksize(len(paths), workers)))
    except BrokenProcessPool:  # workers could not start (e.g. a __main__ read from stdin)
        return [read_trace(p) for p in paths]


def _read_detached(path: str) -> TraceData:
    """read_trace, with the streams copied out of the reader's arena so that only the events
    travel back to the parent, not the arena's spare capacity."""
    data = read_trace(path)
    for cols in data.columns.values():
        if isinstance(cols, RankColumns):
            cols.stream = {name: np.array(col) for name, col in cols.stream.items()}
            cols.piece = None
    data.arena = Arena()
    return data


def write_data(path: str | os.PathLike, data: TraceData, rows: bool = False) -> None:
    """Write decoded data back: as a merged trace (pattern blocks, what goldens are), or with
    `rows` as a part-style file of one row per event (for tests of the streamed form)."""
    with atomic_path(path) as tmp:
        _write_data(tmp, data, rows)


def _write_data(path: str, data: TraceData, rows: bool) -> None:
    w = TraceWriter(path, dict(data.header))
    try:
        if rows:
            for g in data.groups.values():
                w.group(g["gid"], g["name"], g["ranks"], g["desc"])
            for rank, cols in data.columns.items():
                _write_rows(w, rank, {name: cols[name] for name in COLUMN_NAMES}, data.atoms)
        else:
            for rank, cols in _Tables(w).remap(data).items():
                w.block(rank, cols)
        w.numerics(data.numerics)
        for rank, cols in data.columns.items():
            end = data.ends.get(rank, {"n": len(cols["op"]), "status": "ok", "error": None})
            w.end(rank, end["n"], end["status"], end["error"], end.get("error_text"))
        w.footer()
    finally:
        w.close()


def _write_rows(w: TraceWriter, rank: int, cols: dict[str, np.ndarray], atoms: list) -> None:
    for i in range(len(cols["op"])):
        row = []
        for name in COLUMN_NAMES:
            v = cols[name][i].item()
            row.append(w.atom(_hashable(atoms[v])) if name in ATOM_COLUMNS and v >= 0 else v)
        w.row(rank, row)


def _hashable(v: Any) -> Any:
    return tuple(_hashable(x) for x in v) if isinstance(v, list) else v


def write_all(
    path: str | os.PathLike, header: dict, events: dict[int, list[dict]], groups: Iterable[dict] = ()
) -> None:
    """Write events given as dicts per rank (atom columns as plain values) as one trace.
    For tests and synthetic traces; the recorder streams rows itself."""
    w = TraceWriter(path, header)
    try:
        for g in groups:
            w.group(g["gid"], g["name"], g["ranks"], g["desc"])
        for rank, evs in events.items():
            for ev in evs:
                ev = dict(ev)
                for name in ATOM_COLUMNS:
                    if name in ev:
                        ev[name] = w.atom(ev[name])
                w.row(rank, default_row(**ev))
            w.end(rank, len(evs))
        w.footer()
    finally:
        w.close()
