"""Only what a hang verdict needs: each group's frontier, and a little history to explain it.

A hang post-mortem (waitfor.frontier) looks at collective instances that are not completed on
evidence -- some dumped member does not hold it, or no member says `completed` -- and at p2p
transfers one side lacks or neither completed. Everything before a group's first such instance
is done on every rank and only history. So each dump is first reduced to a `Summary` (per
group: oldest, newest and first not-completed `seq`; per p2p direction: count and first
not-completed; the group sizes its gathers show), small enough to ship from wherever the dumps
were decoded (a worker process, a Ray worker); `plan` reduces the summaries of all ranks to one
cut per group and per p2p direction, and `cut` keeps each rank's entries from there on.

Where the cut is (D: a group's first instance that is not done, at or past its horizon -- the
newest of the members' oldest instances, where a wrapped ring buffer starts for everyone):
  D = max(horizon, min(min over dumped members of newest + 1, max over members of first open)),
a member that left a dump but holds nothing on the group making it the horizon (nothing done).
`context` instances before D are kept (never below the horizon), so the checks that explain a
hang still see how each rank arrived there. A p2p direction (group, src, dst) is numbered from 0
on both sides: D = min(sends, recvs, max(first open send, first open recv)); one side alone
keeps everything. A rank's last entry on each of its groups is always kept (newest >= D - 1).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from analyzer.sources.flight_recorder import conventions as conv
from analyzer.sources.flight_recorder.blocks import RankDump
from traceformat.ops import GATHER_OPS, UNEVEN_OPS

CONTEXT = 8  # instances of history kept before each group's frontier
GATHERS = frozenset(GATHER_OPS - UNEVEN_OPS)  # an uneven gather's sizes show no group size
P2P_OPS = ("send", "recv")


@dataclass(kw_only=True, slots=True)
class Summary:
    """One rank's dump, as `plan` needs it (a few rows per group)."""

    rank: int
    pgs: list
    """(name, desc) per local pg id, as RankDump.pgs."""
    config: list
    """(name, desc, members) from pg_config."""
    coll: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), dtype=np.int64))
    """Per local pg with collectives: pg, oldest seq, newest seq, first seq not completed."""
    p2p: np.ndarray = field(default_factory=lambda: np.zeros((0, 5), dtype=np.int64))
    """Per (pg, op, peer) p2p direction: pg, 0 send / 1 recv, peer (group rank), ops, first open."""
    hints: dict = field(default_factory=dict)
    """Local pg -> group size its all-gathers / all_to_alls show (groups.build_groups)."""
    used: list = field(default_factory=list)
    """Local pgs the entries name."""
    n: int = 0
    """Entries."""


def number_p2p(d: RankDump) -> None:
    """cols["p2p_num"]: each send / recv numbered from 0 per (pg, op, peer) in record order, as
    commtrace numbers p2p (per (group, src, dst) on both sides), on the whole dump: a window of
    it keeps the numbers (-1 for other entries)."""
    c = d.cols
    op = np.array([P2P_OPS.index(s[0]) if s[0] in P2P_OPS else -1 for s in d.sites] + [-1])[c["site"]]
    peer = np.array([s[2] for s in d.sites] + [-1], dtype=np.int64)[c["site"]]
    num = np.full(len(op), -1, dtype=np.int64)
    idx = np.flatnonzero(op >= 0)
    if len(idx):
        key = (c["pg"][idx].astype(np.int64) << 40) | (op[idx].astype(np.int64) << 32) | (peer[idx] + 1)
        order = np.argsort(key, kind="stable")
        sk = key[order]
        starts = np.r_[0, np.flatnonzero(sk[1:] != sk[:-1]) + 1]
        num[idx[order]] = np.arange(len(sk)) - np.repeat(starts, np.diff(np.r_[starts, len(sk)]))
    c["p2p_num"] = num
    c["p2p_op"] = op
    c["p2p_peer"] = peer


def summarize(d: RankDump) -> Summary:
    """The rank's Summary (d must be read without error, with number_p2p applied)."""
    c = d.cols
    s = Summary(rank=d.rank if d.rank is not None else -1, pgs=d.pgs, config=d.config)
    s.used = np.unique(c["pg"]).tolist()
    s.n = len(c["site"])
    completed = np.array([x == "completed" for x in d.states] + [False], dtype=bool)[c["state"]]
    coll = c["p2p_op"] < 0
    rows = []
    for pg in np.unique(c["pg"][coll]).tolist() if coll.any() else []:  # a few groups per rank
        mine = coll & (c["pg"] == pg)
        seq = c["seq"][mine]
        open_ = seq[~completed[mine]]
        hi = int(seq.max())
        rows.append((pg, int(seq.min()), hi, int(open_.min()) if len(open_) else hi + 1))
    if rows:
        s.coll = np.array(rows, dtype=np.int64)
    p2p = c["p2p_op"] >= 0
    if p2p.any():  # per (pg, op, peer) direction: how many, the first not completed
        key = (
            (c["pg"][p2p].astype(np.int64) << 34) | (c["p2p_op"][p2p].astype(np.int64) << 32) | (c["p2p_peer"][p2p] + 1)
        )
        keys, at = np.unique(key, return_inverse=True)
        at = at.reshape(-1)
        n = np.bincount(at, minlength=len(keys))
        big = np.iinfo(np.int64).max
        open_num = np.where(completed[p2p], big, c["p2p_num"][p2p])
        order = np.lexsort((open_num, at))
        first = np.r_[0, np.flatnonzero(np.diff(at[order])) + 1]
        fo = open_num[order][first]
        fo = np.where(fo == big, n, fo)
        s.p2p = np.stack([keys >> 34, (keys >> 32) & 3, (keys & 0xFFFFFFFF) - 1, n, fo], axis=1)
    s.hints = size_hints(d)
    return s


def size_hints(d: RankDump) -> dict[int, int]:
    """Local pg -> group size its recorded all-gathers (output numel / input numel) and list
    all_to_alls (one input per member) show."""
    c = d.cols
    wanted = np.array([x[0] in GATHERS or x[0] == "all_to_all" for x in d.sites] + [False], dtype=bool)[c["site"]]
    out: dict[int, int] = defaultdict(int)
    if not wanted.any():
        return out
    key = np.stack([c["site"], c["pg"], c["in_shapes"], c["out_shapes"]], axis=1)[wanted].astype(np.int64)
    packed = (key[:, 0] << 48) | (key[:, 1] << 32) | ((key[:, 2] + 1) << 16) | (key[:, 3] + 1)  # ids < 2**15
    if int(key.max(initial=0)) >= 2**15:
        distinct = np.unique(key, axis=0).tolist()
    else:
        u = np.unique(packed)
        distinct = np.stack([u >> 48, (u >> 32) & 0xFFFF, ((u >> 16) & 0xFFFF) - 1, (u & 0xFFFF) - 1], axis=1).tolist()
    for site, pg, i, o in distinct:
        ins = d.shapes[i] if i >= 0 else ()
        outs = d.shapes[o] if o >= 0 else ()
        if d.sites[site][0] == "all_to_all":
            hint = len(ins)
        else:
            n_in = sum(conv.numel(s) for s in ins)
            n_out = sum(conv.numel(s) for s in outs)
            hint = n_out // n_in if n_in and n_out % n_in == 0 else 0
        out[pg] = max(out[pg], hint)
    return dict(out)


@dataclass(kw_only=True, slots=True)
class Cut:
    """Where one rank's kept entries start."""

    coll: dict = field(default_factory=dict)
    """Local pg -> first collective seq kept."""
    p2p: dict = field(default_factory=dict)
    """(local pg, op, peer) -> first p2p number kept."""


def plan(summaries: list[Summary], groups: dict, gid_of: dict, context: int = CONTEXT) -> dict[int, Cut]:
    """Per rank its Cut, from every rank's Summary and the groups they resolve to
    (groups.build_groups: gid -> group, rank -> {global pg key id: gid}), with `gid_of` keyed
    by each Summary's local pg ids here (resolve_local)."""
    big = np.iinfo(np.int64).max
    context = max(1, context)  # at least each rank's last op on each group (newest >= D - 1)
    dumped = {s.rank for s in summaries}
    horizon: dict[int, int] = defaultdict(lambda: -big)
    newest: dict[int, int] = {}
    first_open: dict[int, int] = defaultdict(lambda: -big)
    holders: dict[int, set] = defaultdict(set)
    sends: dict[tuple, tuple] = {}
    recvs: dict[tuple, tuple] = {}
    members = {gid: g["ranks"] for gid, g in groups.items()}
    for s in summaries:
        table = gid_of[s.rank]
        for pg, lo, hi, fo in s.coll.tolist():
            gid = table.get(pg, -1)
            if gid < 0:  # a group no pg_config or entry resolves: kept whole (start stays -big)
                continue
            horizon[gid] = max(horizon[gid], lo)
            newest[gid] = min(newest.get(gid, big), hi + 1)
            first_open[gid] = max(first_open[gid], fo)
            holders[gid].add(s.rank)
        for pg, op, peer, n, fo in s.p2p.tolist():
            gid = table.get(pg, -1)
            ms = members.get(gid, [])
            other = ms[peer] if 0 <= peer < len(ms) else None
            if other is None:
                continue
            key = (gid, s.rank, other) if op == 0 else (gid, other, s.rank)
            (sends if op == 0 else recvs)[key] = (n, fo)
    start: dict[int, int] = {}
    for gid in holders:
        if any(m in dumped and m not in holders[gid] for m in members.get(gid, [])):
            frontier = horizon[gid]  # a dumped member holds nothing here: nothing is done
        else:
            frontier = max(horizon[gid], min(newest[gid], first_open[gid]))
        start[gid] = max(horizon[gid], frontier - context)
    p2p_start = {}
    for key in sends.keys() | recvs.keys():
        if key in sends and key in recvs:
            (ns, fs), (nr, fr) = sends[key], recvs[key]
            p2p_start[key] = max(0, min(ns, nr, max(fs, fr)) - context)
        else:
            p2p_start[key] = 0
    out = {}
    for s in summaries:
        table = gid_of[s.rank]
        cut = Cut(coll={pg: start.get(table.get(pg, -1), -big) for pg in s.coll[:, 0].tolist()})
        for pg, op, peer, _, _ in s.p2p.tolist():
            ms = members.get(table.get(pg, -1), [])
            if 0 <= peer < len(ms):
                key = (table.get(pg, -1), s.rank, ms[peer]) if op == 0 else (table.get(pg, -1), ms[peer], s.rank)
                cut.p2p[(pg, op, peer)] = p2p_start.get(key, 0)
        out[s.rank] = cut
    return out


# The columns assemble reads (dumps._globalize), in the block a window travels in.
PACKED: tuple[str, ...] = ("site", "pg", "seq", "in_shapes", "out_shapes", "dtype", "state", "ts_ns")
PACKED += ("record_id", "fr_seq", "fr_p2p_seq", "p2p_num")


def pack(d: RankDump) -> RankDump:
    """d ready to travel back from where it was decoded: the columns assemble reads as one
    int64 block (one array, not fourteen: 100,000 windows of ~20 entries are mostly object
    headers otherwise), pg_config left behind (the rank's Summary carries it)."""
    d.cols = {"packed": np.stack([d.cols[k].astype(np.int64, copy=False) for k in PACKED])}
    d.config = []
    return d


def unpack(d: RankDump) -> RankDump:
    """pack undone: each column a row of the block (no copy)."""
    block = d.cols.get("packed")
    if block is not None:
        d.cols = dict(zip(PACKED, block))
    return d


def rows(d: RankDump) -> int:
    """Entries in d, packed or not."""
    block = d.cols.get("packed")
    return block.shape[1] if block is not None else len(d.cols["site"])


def cut(d: RankDump, where: Cut) -> RankDump:
    """d with only the entries from its cut on (its tables unchanged)."""
    c = d.cols
    keep = np.ones(len(c["site"]), dtype=bool)
    coll = c["p2p_op"] < 0
    for pg, first in where.coll.items():
        keep &= ~(coll & (c["pg"] == pg) & (c["seq"] < first))
    for (pg, op, peer), first in where.p2p.items():
        if first > 0:
            keep &= ~((c["pg"] == pg) & (c["p2p_op"] == op) & (c["p2p_peer"] == peer) & (c["p2p_num"] < first))
    if not keep.all():
        d.cols = {k: v[keep] for k, v in c.items()}
    return d
