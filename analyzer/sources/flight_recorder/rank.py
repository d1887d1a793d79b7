"""One FR dump file -> compact numpy columns with small local tables (a pure function, run in
worker processes when there are many dumps: unpickling is the cost, and it parallelises).

Each entry field is pulled out with a C-level `map(itemgetter)`; values are interned per
distinct value (a job has few shapes, ops and call sites), so the Python work per entry is a
handful of C calls and what travels back to the parent is ~40 bytes per entry.
"""

from __future__ import annotations

import gc
import os
from itertools import repeat
from operator import itemgetter, methodcaller

import numpy as np

from analyzer.model.trace import LoadError
from analyzer.sources.flight_recorder import conventions as conv
from analyzer.sources.flight_recorder import scanned
from analyzer.sources.flight_recorder.blocks import RankDump, coalesced_blocks, gloo_done
from analyzer.sources.flight_recorder.read import rank_of, read_dump

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
    """One dump file decoded (never raises: errors are in the result). The cyclic collector is
    off throughout, as in the parent: a dump is ~10^5 fresh containers, and with it on (a worker
    process starts with it on) collections of the young generation walk them again and again --
    measured, 40% of a worker's time per dump."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_rank(file_kind)
    finally:
        if enabled:
            gc.enable()


def read_rank_data(name: str, data: bytes, kind: str) -> RankDump:
    """read_rank of a dump's bytes (`name`: where they came from, for the rank and messages)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_rank((name, kind), data)
    finally:
        if enabled:
            gc.enable()


def _read_rank(file_kind: tuple[str, str], data: bytes | None = None) -> RankDump:
    file, kind = file_kind
    out = RankDump(file=file)
    if kind == "pickle" and scanned.available():
        got = _read_scanned(out, file, data)
        if got is not None:
            return got
        out = RankDump(file=file)
    try:
        dump = read_dump(file, kind, data)
    except LoadError as e:
        out.error, out.refused = str(e), "refused" in str(e)
        return out
    out.rank = rank_of(dump, file)
    out.version = str(dump.get("version", "?"))
    out.config = conv.config_groups(dump.get("pg_config"))
    entries = dump["entries"]
    fast = _columns(entries)
    bad = _invalid(entries, fast)
    if bad:
        out.error, out.refused = f"{os.path.basename(file)}: not a Flight Recorder dump ({bad})", True
        return out
    try:
        return _decode(out, dump, entries, fast)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError) as e:
        out.error, out.refused = (
            (
                f"{os.path.basename(file)}: not a Flight Recorder dump (an entry field of an "
                f"unexpected type: {type(e).__name__})"
            ),
            True,
        )
        return out


def _read_scanned(out: RankDump, file: str, data: bytes | None) -> RankDump | None:
    """The C reader's way (scanned.py); None: read it as dicts (what it gave up on, in the
    dict reader's words, or refused)."""
    if data is None:
        try:
            with open(file, "rb") as f:
                data = f.read()
        except OSError:
            return None
    s = scanned.scan(data)
    if s is None:
        return None
    out.rank = rank_of(s.root, file)
    out.version = str(s.root.get("version", "?"))
    out.config = conv.config_groups(s.root.get("pg_config"))
    return scanned.decode(out, s)


def _decode(out: RankDump, dump: dict, entries: list, fast: dict) -> RankDump:
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
    if not all(len(k) == 2 and isinstance(k[0], str) and isinstance(k[1], str) for k in out.pgs):
        raise TypeError("process_group is not a (name, description) pair of strings")  # once per group
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
    out.dtypes = [conv.dtype_pair(i, o) for i, o in pairs]
    seq = (
        _column(entries, "collective_seq_id", None, fast)
        if entries and "collective_seq_id" in entries[0]
        else _column(entries, "seq_id", 0)
    )
    p2p_seq = _column(entries, "p2p_seq_id", 0) if entries and "p2p_seq_id" in entries[0] else [0] * len(entries)
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
        "fr_seq": np.array(seq, dtype=np.int64),
        "fr_p2p_seq": np.array(p2p_seq, dtype=np.int64),
    }
    coalesced_blocks(out, _column(entries, "is_p2p", False))
    return out


# Entries a key must hold, and the types FR writes there (a JSON dump written by hand or another
# tool can hold anything: it is refused in one line naming the entry and key, not loaded empty).
REQUIRED = {"profiling_name": (str,), "input_sizes": (list,), "output_sizes": (list,)}
# (numeric columns are checked by numpy when they become arrays: a wrong type is a LoadError too)
TYPED = {
    "profiling_name": (str,),
    "input_sizes": (list,),
    "output_sizes": (list,),
    "state": (str,),
    "collective_seq_id": (int,),
    "seq_id": (int,),
    "input_dtypes": (list,),
    "output_dtypes": (list,),
    "process_group": (list, tuple, type(None)),
}


def _invalid(entries: list, fast: dict) -> str | None:
    """Why the entries are not FR entries ('entry 3 has no key 'input_sizes''), None when sound.
    One C-level pass per key (a set of the types seen), a Python look only when one is off."""
    if not entries:
        return None
    keys = set(entries[0]) | set(entries[-1])
    for key, types in TYPED.items():
        if key in fast:
            values = fast[key]
        elif not fast and (key in REQUIRED or key in keys):  # an older or odd dump: the slow look
            values = list(map(methodcaller("get", key, _ABSENT), entries))
        else:  # other keys are read as numbers below, where a wrong type is a LoadError too
            continue
        seen = set(map(type, values))
        if _ABSENT.__class__ in seen and key in REQUIRED:
            return f"entry {values.index(_ABSENT)} has no key '{key}'"
        seen.discard(_ABSENT.__class__)
        if not seen <= set(types) or (int in types and bool in seen):
            i = next(i for i, v in enumerate(values) if v is not _ABSENT and type(v) not in types)
            return f"entry {i}: key '{key}' holds {type(values[i]).__name__}, expected {types[0].__name__}"
    if "collective_seq_id" not in keys and "seq_id" not in keys:
        return "entry 0 has no key 'collective_seq_id'"
    return None


class _Absent:
    pass


_ABSENT = _Absent()


def _upgrade_state(entries: list, state: list, pg_status, gloo: np.ndarray) -> list:
    """gloo's states upgraded from its pg_status (blocks.gloo_done)."""
    if not isinstance(pg_status, dict) or not any(gloo):
        return state
    pg_ids = np.array(_column(entries, "pg_id", -1), dtype=np.int64)
    op_ids = np.array(_column(entries, "op_id", -1), dtype=np.int64)
    done = gloo_done(pg_ids, op_ids, pg_status, gloo)
    return [("completed" if d else s) for s, d in zip(state, done.tolist())]
