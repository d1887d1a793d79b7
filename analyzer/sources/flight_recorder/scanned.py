"""One pickle dump straight into columns by the C reader (_frscan.c: executes nothing, builds no
entry dict), then the same RankDump as rank.py makes from unpickled dicts -- numpy over the
entries, Python only once per distinct value (a call site, a shape, a group).

`decode(data)` is None where the C reader is not built, or gave the dump up (an opcode that
names a callable, a malformed stream, an odd shape), or the columns fail a check the dict
reader words precisely: the caller then reads the file with the restricted unpickler
(rank.py), which decides what to refuse and how to say it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.sources.flight_recorder import conventions as conv
from analyzer.sources.flight_recorder.blocks import RankDump, coalesced_blocks, dense_unique, gloo_done

try:
    from analyzer.sources.flight_recorder import _frscan  # type: ignore[attr-defined]
except ImportError:  # not built (no compiler at install time): the restricted unpickler reads
    _frscan = None

INT_KEYS = ("record_id", "pg_id", "op_id", "collective_seq_id", "seq_id", "p2p_seq_id", "time_created_ns", "is_p2p")
OBJ_KEYS = (
    "profiling_name",
    "frames",
    "process_group",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
)
MISSING = np.iinfo(np.int64).min  # the C reader's sentinels
NONE = MISSING + 1


def available() -> bool:
    return _frscan is not None


@dataclass(kw_only=True, slots=True)
class Scanned:
    root: dict
    """The dump without its entries (version, pg_config, pg_status, rank...)."""
    n: int
    """Entries."""
    ints: dict
    """key -> int64 per entry (MISSING where absent, NONE where None)."""
    flags: dict
    """key -> kinds seen (_frscan.INT, BOOL, NONE, OTHER)."""
    ids: dict
    """key -> int32 per entry: index into `tables[key]`, -1 where absent."""
    tables: dict
    """key -> the distinct values (by identity: equal values may repeat)."""


def scan(data) -> Scanned | None:
    if _frscan is None:
        return None
    got = _frscan.decode(data, INT_KEYS, OBJ_KEYS)
    if got is None:
        return None
    root, n, ints, flags, ids, tables = got
    entries = root.get("entries") if isinstance(root, dict) else None
    if not isinstance(entries, list) or len(entries) != n:  # entries not where FR puts them
        return None
    root = {k: v for k, v in root.items() if k != "entries"}
    return Scanned(
        root=root,
        n=n,
        ints={k: np.frombuffer(b, dtype=np.int64).copy() for k, b in zip(INT_KEYS, ints)},
        flags=dict(zip(INT_KEYS, flags)),
        ids={k: np.frombuffer(b, dtype=np.int32).copy() for k, b in zip(OBJ_KEYS, ids)},
        tables=dict(zip(OBJ_KEYS, tables)),
    )


def _intern(keys: list, ids: np.ndarray) -> tuple[list, np.ndarray]:
    """(distinct keys the entries use, sorted by repr; per entry the index of its key): `keys[i]`
    is the key of table id i, as rank._intern gives for the same values."""
    used = dense_unique(ids % max(len(keys), 1), max(len(keys), 1))[0].tolist()  # -1: the last key
    distinct = sorted({keys[i] for i in used}, key=repr)
    order = {v: i for i, v in enumerate(distinct)}
    lut = np.zeros(max(len(keys), 1), dtype=np.int32)
    lut[used] = [order[keys[i]] for i in used]
    return distinct, lut[ids]


def _ints(s: Scanned, key: str, default: int) -> np.ndarray | None:
    """An int column with `default` where absent; None when it holds None or a non-int
    (the dict reader's message says which entry)."""
    if s.flags[key] & (_frscan.NONE | _frscan.OTHER):
        return None
    v = s.ints[key]
    return np.where(v == MISSING, default, v) if (v == MISSING).any() else v


def _typed(s: Scanned, key: str, types: tuple, required: bool) -> bool:
    ids, table = s.ids[key], s.tables[key]
    if required and (ids < 0).any():
        return False
    return all(type(v) in types for v in table)


def decode(out: RankDump, s: Scanned) -> RankDump | None:
    """`out` filled from the scanned columns (rank._decode's result for the same dump), or None
    when the dict reader must look (an entry it would refuse, in its words)."""
    n, ids, tables = s.n, s.ids, s.tables
    if not (
        _typed(s, "profiling_name", (str,), True)
        and _typed(s, "input_sizes", (list,), True)
        and _typed(s, "output_sizes", (list,), True)
        and _typed(s, "state", (str,), False)
        and _typed(s, "input_dtypes", (list,), False)
        and _typed(s, "output_dtypes", (list,), False)
        and _typed(s, "process_group", (list, tuple, type(None)), False)
    ):
        return None
    has = {k: bool(n) and s.ints[k][0] != MISSING for k in ("collective_seq_id", "seq_id", "p2p_seq_id")}
    if n and not has["collective_seq_id"] and not has["seq_id"]:
        return None
    seq_key = "collective_seq_id" if has["collective_seq_id"] or not n else "seq_id"
    if s.flags[seq_key] & _frscan.BOOL or (has["collective_seq_id"] and (s.ints[seq_key] == MISSING).any()):
        return None
    cols = {k: _ints(s, k, d) for k, d in (("record_id", 0), ("time_created_ns", 0), ("p2p_seq_id", 0), (seq_key, 0))}
    pg_ids, op_ids = _ints(s, "pg_id", -1), _ints(s, "op_id", -1)
    pg_or_0 = None if pg_ids is None else np.where(s.ints["pg_id"] == MISSING, 0, pg_ids)
    if any(v is None for v in cols.values()):
        return None
    try:
        _sites(out, s)
        if not _groups(out, s, pg_or_0):
            return None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError):
        return None  # the dict reader words it
    shape_keys = [tuple(map(tuple, v)) for v in tables["input_sizes"]]
    n_in = len(shape_keys)
    shape_keys += [tuple(map(tuple, v)) for v in tables["output_sizes"]]
    out.shapes, shape_ids = _intern(shape_keys, np.concatenate([ids["input_sizes"], ids["output_sizes"] + n_in]))
    dts = _dtypes(out, s)
    site = out.cols.pop("site")
    gloo = np.array([x[3] == "gloo" for x in out.sites] + [False], dtype=bool)[site]
    states = [None, *tables["state"]]
    state_ids = ids["state"] + 1
    if gloo.any() and isinstance(s.root.get("pg_status"), dict):
        if pg_ids is None or op_ids is None:
            return None
        done = gloo_done(pg_ids, op_ids, s.root.get("pg_status"), gloo)
        states.append("completed")
        state_ids = np.where(done, len(states) - 1, state_ids)
    out.states, state_col = _intern(states, state_ids)
    seq = cols[seq_key]
    assert seq is not None  # checked above
    out.cols = {
        "site": site,
        "pg": out.cols["pg"],
        "seq": seq - 1,
        "in_shapes": shape_ids[:n],
        "out_shapes": shape_ids[n:],
        "dtype": dts,
        "state": state_col,
        "ts_ns": cols["time_created_ns"],
        "record_id": cols["record_id"],
        "fr_seq": seq,
        "fr_p2p_seq": cols["p2p_seq_id"] if has["p2p_seq_id"] else np.zeros(n, dtype=np.int64),
    }
    if s.flags["is_p2p"] & (_frscan.NONE | _frscan.OTHER):
        return None
    p2p = s.ints["is_p2p"]
    coalesced_blocks(out, (p2p != MISSING) & (p2p != 0))
    return out


def _sites(out: RankDump, s: Scanned) -> None:
    """Call sites (op, user frame, peer, backend): resolved once per distinct (name, frames)."""
    names, frames = s.tables["profiling_name"], s.tables["frames"]
    key = s.ids["profiling_name"].astype(np.int64) * (len(frames) + 1) + (s.ids["frames"] + 1)
    pairs, inverse = dense_unique(key, len(names) * (len(frames) + 1))
    resolved = []
    for k in pairs.tolist():
        name, f = names[k // (len(frames) + 1)], k % (len(frames) + 1) - 1
        backend, backend_op, peer = conv.parse_profiling_name(name)
        api, user = conv.call_site(frames[f] if f >= 0 else None)
        resolved.append((conv.program_op(backend, backend_op, api), user, peer, backend))
    out.sites = sorted(set(resolved), key=repr)
    order = {v: i for i, v in enumerate(out.sites)}
    out.cols["site"] = np.array([order[v] for v in resolved] + [0], dtype=np.int32)[inverse]


def _groups(out: RankDump, s: Scanned, pg_ids: np.ndarray | None) -> bool:
    """Per entry its (name, desc) process group; very old dumps name only a pg_id."""
    table, ids = s.tables["process_group"], s.ids["process_group"]
    keys = [tuple(g) if g else None for g in table]
    if None in keys or () in keys or (ids < 0).any():  # only a pg_id: (pg_id, "undefined")
        if pg_ids is None:
            return False
        bad = np.array([k is None or k == () for k in keys] + [True], dtype=bool)[ids]
        fallback = np.where(bad, pg_ids, -(2**62))
        pgs = np.unique(fallback[bad]).tolist()
        keys += [(str(p), "undefined") for p in pgs]
        ids = np.where(bad, len(table) + np.searchsorted(pgs, fallback).astype(np.int32), ids)
    out.pgs, out.cols["pg"] = _intern(keys, ids)
    return all(
        isinstance(k, tuple) and len(k) == 2 and isinstance(k[0], str) and isinstance(k[1], str) for k in out.pgs
    )


def _dtypes(out: RankDump, s: Scanned) -> np.ndarray:
    """Per entry its dtype text ('bfloat16', 'float32->bfloat16'), once per distinct pair."""
    ins, outs = s.tables["input_dtypes"], s.tables["output_dtypes"]
    key = (s.ids["input_dtypes"].astype(np.int64) + 1) * (len(outs) + 1) + (s.ids["output_dtypes"] + 1)
    pairs, inverse = dense_unique(key, (len(ins) + 1) * (len(outs) + 1))
    canon = []
    for k in pairs.tolist():
        i, o = k // (len(outs) + 1) - 1, k % (len(outs) + 1) - 1
        canon.append((tuple(ins[i]) if i >= 0 else (), tuple(outs[o]) if o >= 0 else ()))
    distinct, pair_ids = _intern(canon, inverse)
    out.dtypes = [conv.dtype_pair(i, o) for i, o in distinct]
    return pair_ids
