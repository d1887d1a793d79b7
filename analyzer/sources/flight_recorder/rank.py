"""One FR dump file -> compact numpy columns with small local tables (a pure function, run in
worker processes when there are many dumps: unpickling is the cost, and it parallelises).

Each entry field is pulled out with a C-level `map(itemgetter)`; values are interned per
distinct value (a job has few shapes, ops and call sites), so the Python work per entry is a
handful of C calls and what travels back to the parent is ~40 bytes per entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter

import numpy as np

from analyzer.sources.flight_recorder import conventions as conv
from analyzer.sources.flight_recorder.read import rank_of, read_dump
from analyzer.trace import LoadError


@dataclass
class RankDump:
    file: str
    rank: int | None = None
    error: str | None = None
    refused: bool = False
    version: str = "?"
    config: list = field(default_factory=list)
    """(name, desc, members) from pg_config."""
    sites: list = field(default_factory=list)
    """Per call site: (op, user frame, peer group rank, backend)."""
    pgs: list = field(default_factory=list)
    """(name, desc) per local pg id."""
    shapes: list = field(default_factory=list)
    """Shape lists as tuples of tuples (((4,), (2, 3)))."""
    dtypes: list = field(default_factory=list)
    states: list = field(default_factory=list)
    cols: dict = field(default_factory=dict)
    """site, pg, seq (from 0), in_shapes, out_shapes, dtype, state (ids into the tables above),
    ts_ns, record_id."""


FIELDS = (
    "profiling_name",
    "frames",
    "process_group",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "collective_seq_id",
    "time_created_ns",
    "record_id",
)


def _columns(entries: list) -> dict:
    """The fields every current dump has, as columns: one itemgetter call per entry and one
    transpose (half the cost of a pass per field). Empty when a field is missing somewhere."""
    try:
        cols = list(zip(*map(itemgetter(*FIELDS), entries)))
    except KeyError:
        return {}
    return dict(zip(FIELDS, map(list, cols))) if cols else {}


def _column(entries: list, key: str, default=None, fast: dict | None = None) -> list:
    if fast and key in fast:
        return fast[key]
    try:
        return list(map(itemgetter(key), entries))
    except KeyError:  # older FR versions lack some keys
        return [e.get(key, default) for e in entries]


def _intern(values: list) -> tuple[list, np.ndarray]:
    """(distinct values, id of each value): one C-level map, no Python loop per value."""
    table = {v: i for i, v in enumerate(sorted(set(values), key=repr))}
    return list(table), np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=len(values))


def read_rank(file_kind: tuple[str, str]) -> RankDump:
    file, kind = file_kind
    out = RankDump(file=file)
    try:
        dump = read_dump(file, kind)
    except LoadError as e:
        out.error, out.refused = str(e), "refused" in str(e)
        return out
    out.rank = rank_of(dump, file)
    out.version = str(dump.get("version", "?"))
    out.config = conv.config_groups(dump.get("pg_config"))
    entries = dump["entries"]
    fast = _columns(entries)
    names = _column(entries, "profiling_name", "", fast)
    frames = _column(entries, "frames", None, fast)
    if None in frames:
        frames = [f or () for f in frames]
    # FR pickles share each frame dict between the entries of one call site: their ids key the site
    keys = list(zip(names, map(tuple, map(map, repeat(id), frames))))
    sites, site = _intern(keys)
    first = dict(zip(keys, frames))
    resolved = []
    for key in sites:  # once per call site
        backend, backend_op, peer = conv.parse_profiling_name(key[0])
        api, user = conv.call_site(first[key])
        resolved.append((conv.program_op(backend, backend_op, api), user, peer, backend))
    # sites were keyed by object ids: renumber them by what they resolve to (deterministic output)
    out.sites = sorted(set(resolved), key=repr)
    order = {v: i for i, v in enumerate(out.sites)}
    site = np.array([order[v] for v in resolved] + [0], dtype=np.int32)[site]
    groups = _column(entries, "process_group", None, fast)
    groups = list(map(tuple, groups)) if None not in groups else [tuple(p) if p else None for p in groups]
    if None in groups or () in groups:  # very old dumps: only pg_id
        groups = [g or (str(pid), "undefined") for g, pid in zip(groups, _column(entries, "pg_id", 0))]
    out.pgs, pg = _intern(groups)
    # shapes keyed as tuples of tuples, built by C-level maps (no Python call per entry)
    shape_keys = list(map(tuple, map(map, repeat(tuple), _column(entries, "input_sizes", [], fast)))) + list(
        map(tuple, map(map, repeat(tuple), _column(entries, "output_sizes", [], fast)))
    )
    out.shapes, shape_ids = _intern(shape_keys)
    pairs, dts = _intern(
        list(
            zip(
                map(tuple, _column(entries, "input_dtypes", [], fast)),
                map(tuple, _column(entries, "output_dtypes", [], fast)),
            )
        )
    )
    out.dtypes = [conv.dtype_name((i or o or (None,))[0]) for i, o in pairs]
    seq = (
        _column(entries, "collective_seq_id", None, fast)
        if entries and "collective_seq_id" in entries[0]
        else _column(entries, "seq_id", 0)
    )
    gloo = np.array([s[3] == "gloo" for s in out.sites] + [False], dtype=bool)[site]
    state = _upgrade_state(entries, _column(entries, "state", None, fast), dump.get("pg_status"), gloo)
    out.states, state_ids = _intern(state)
    n = len(entries)
    out.cols = {
        "site": site,
        "pg": pg,
        "seq": np.array(seq, dtype=np.int64) - 1,
        "in_shapes": shape_ids[:n],
        "out_shapes": shape_ids[n:],
        "dtype": dts,
        "state": state_ids,
        "ts_ns": np.array(_column(entries, "time_created_ns", 0, fast), dtype=np.int64),
        "record_id": np.array(_column(entries, "record_id", 0, fast), dtype=np.int64),
    }
    return out


def _upgrade_state(entries: list, state: list, pg_status, gloo: np.ndarray) -> list:
    """gloo leaves every entry "scheduled": its pg_status (keyed by pg_id, counting op_id) says
    which ones completed. A completion is never reported falsely, so this only upgrades."""
    if not isinstance(pg_status, dict) or not any(gloo):
        return state
    last = {}
    for pg_id, status in pg_status.items():
        try:
            last[int(pg_id)] = int((status or {}).get("last_completed_collective", -1))
        except (TypeError, ValueError, AttributeError):
            continue
    pg_ids = np.array(_column(entries, "pg_id", -1), dtype=np.int64)
    op_ids = np.array(_column(entries, "op_id", -1), dtype=np.int64)
    done = np.zeros(len(entries), dtype=bool)
    for pg, seq in last.items():
        done |= (pg_ids == pg) & (op_ids <= seq) & (op_ids >= 0)
    done &= gloo
    return [("completed" if d else s) for s, d in zip(state, done.tolist())]
