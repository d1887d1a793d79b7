"""One FR dump file -> compact numpy columns with small local tables (a pure function, run in
worker processes when there are many dumps: unpickling is the cost, and it parallelises).

Each entry field is pulled out with a C-level `map(itemgetter)`; values are interned per
distinct value (a job has few shapes, ops and call sites), so the Python work per entry is a
handful of C calls and what travels back to the parent is ~40 bytes per entry.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter, methodcaller

import numpy as np

from analyzer.model.trace import LoadError
from analyzer.sources.flight_recorder import conventions as conv
from analyzer.sources.flight_recorder.read import rank_of, read_dump


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


def _read_rank(file_kind: tuple[str, str]) -> RankDump:
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


def coalesced_blocks(out: RankDump, is_p2p: list) -> None:
    """ProcessGroupNCCL records each op of a coalesced block (`_coalescing_manager`, FSDP's
    all-gathers, the slow path of uneven all_gather / reduce_scatter as `_broadcast_oop` /
    `_reduce_oop` ops) with the block's one collective_seq_id, then an end marker from
    endCoalescing (`nccl:coalesced`, `ALLGATHER_coalesced`, `REDUCE_SCATTER_coalesced`) with no
    sizes. One block is one collective instance: its ops become one event (the marker's op, the
    ops' shapes in order, the first op's call site), so it is matched and size-checked as a
    whole and never compared as if the marker were a collective. A p2p marker (is_p2p: the end
    of a batch_isend_irecv) only ends its block: dropped."""
    c = out.cols
    marker_sites = np.array([s[0] in conv.COALESCED_MARKERS for s in out.sites] + [False], dtype=bool)
    is_marker = marker_sites[c["site"]]
    if not is_marker.any():
        return
    p2p = (
        np.array([bool(x) for x in is_p2p], dtype=bool)
        if len(is_p2p) == len(c["site"])
        else np.zeros(len(c["site"]), dtype=bool)
    )
    key = (c["pg"].astype(np.int64) << 40) | (c["fr_seq"] & ((1 << 40) - 1))
    coll = ~p2p & (np.array([s[2] < 0 for s in out.sites] + [True], dtype=bool)[c["site"]])
    keep = ~(is_marker & p2p)
    block_keys = np.unique(key[is_marker & ~p2p])
    in_block = coll & np.isin(key, block_keys) & ~is_marker
    if in_block.any():
        _merge_blocks(out, key, is_marker & ~p2p, in_block, keep)
    for k, v in c.items():
        c[k] = v[keep]


def _merge_blocks(out: RankDump, key, marker, in_block, keep) -> None:
    """Each marker takes its block's ops (same pg and seq): their shapes concatenated, the first
    op's site with the marker's op; the ops themselves are dropped (Python per block only)."""
    c = out.cols
    shape_ids = {v: i for i, v in enumerate(out.shapes)}
    site_ids = {v: i for i, v in enumerate(out.sites)}
    members: dict[int, list[int]] = {}
    for i in np.flatnonzero(in_block).tolist():
        members.setdefault(int(key[i]), []).append(i)
    for m in np.flatnonzero(marker).tolist():
        ops = members.get(int(key[m]))
        if not ops:
            continue
        first = out.sites[c["site"][ops[0]]]
        base, block_op = conv.COALESCED_MARKERS[out.sites[c["site"][m]][0]]
        kinds = {out.sites[c["site"][i]][0] for i in ops}
        op = block_op if kinds == {base} else (kinds.pop() if len(kinds) == 1 else "coalesced")
        site = (op, first[1], first[2], first[3])
        if site not in site_ids:
            site_ids[site] = len(out.sites)
            out.sites.append(site)
        c["site"][m] = site_ids[site]
        for col in ("in_shapes", "out_shapes"):
            merged = tuple(s for i in ops for s in out.shapes[c[col][i]])
            if merged not in shape_ids:
                shape_ids[merged] = len(out.shapes)
                out.shapes.append(merged)
            c[col][m] = shape_ids[merged]
        c["dtype"][m] = c["dtype"][ops[0]]
        c["ts_ns"][m] = c["ts_ns"][ops[0]]
        keep[ops] = False


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
