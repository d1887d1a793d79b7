"""What both dump readers (rank.py from unpickled dicts, scanned.py from the C reader's columns)
produce and finish the same way: a `RankDump` of one file, NCCL's coalesced blocks merged into
one event each, and gloo's never-updated states upgraded from its pg_status."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzer.sources.flight_recorder import conventions as conv


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


def coalesced_blocks(out: RankDump, is_p2p) -> None:
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
        np.asarray(is_p2p).astype(bool)  # a list of bools (or None), or the reader's column
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


def gloo_done(pg_ids: np.ndarray, op_ids: np.ndarray, pg_status, gloo: np.ndarray) -> np.ndarray:
    """gloo leaves every entry "scheduled": its pg_status (keyed by pg_id, counting op_id) says
    which ones completed (a completion is never reported falsely, so this only upgrades)."""
    done = np.zeros(len(pg_ids), dtype=bool)
    if not isinstance(pg_status, dict) or not gloo.any():
        return done
    for pg_id, status in pg_status.items():
        try:
            last = int((status or {}).get("last_completed_collective", -1))
            pg = int(pg_id)
        except (TypeError, ValueError, AttributeError):
            continue
        done |= (pg_ids == pg) & (op_ids <= last) & (op_ids >= 0)
    return done & gloo


def dense_unique(key: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(key, return_inverse=True) for keys in [0, bound): a count and a lookup table
    instead of a sort, when the bound is small (table ids: a few per dump)."""
    if bound > 4 * len(key) + 1024:
        values, inverse = np.unique(key, return_inverse=True)
        return values, inverse.reshape(-1)
    present = np.bincount(key, minlength=bound) > 0
    values = np.flatnonzero(present)
    lut = np.zeros(bound, dtype=np.int64)
    lut[values] = np.arange(len(values))
    return values, lut[key]
