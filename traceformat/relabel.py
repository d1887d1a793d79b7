"""One rank's events derived from another's by relabelling global ranks, and an exact comparison
of two ranks' events. Torch-free: tracer/record/sharing.py decides when a relabelling is exact and
which ranks map to which; this module only knows where a trace holds ranks.

Every rank-bearing place of a rank's stream, and how a relabelling `rank_map` (old global rank
-> new) treats it:

- `group` of a collective, p2p or wait-free op: the group whose member set is the image of the
  old group's, taken from the same *family* (the groups created together by one mesh dim or one
  `new_group` series: consecutive gids of one `desc` whose member sets are disjoint), since one
  set of ranks can have several groups (a `tp` group of the data-loading mesh and one of the
  dense mesh). The group table itself is global (every rank creates every group), so it is
  not rewritten: a group's member order is torch's, and a derived event points at that group.
- group creation (`init_process_group`, `new_group`, `split_group`): every rank creates every
  group in the same order, so the `group` column is kept and `info.member` recomputed for the
  new rank.
- `peer` of a p2p op: the peer's image (a program addresses its pipeline neighbours relative to
  itself). `peer` of a rooted collective: the member at the root's *group position* in the new
  group (a root is a group index or one fixed rank on every member, never relative).
- `info.ranks` of a `mesh` event (the sub-mesh this rank is in, in mesh order): the image's
  ranks in ascending order, which is mesh order for a mesh unflattened from the world.
- per-member lists (all_to_all_single `splits`, the per-member shapes of list collectives):
  reordered to the new group's member order.
- `info` keys not listed in KNOWN_INFO: refused (RelabelError), never copied unmapped.

Everything else (shapes, bytes, dtypes, modules, frames, steps, seq, batch, parent / ref,
timestamps) is copied: the derived rank carries the source rank's timestamps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traceformat.codec import RankColumns, split
from traceformat.format import ATOM_COLUMNS, COLUMN_NAMES, COLUMNS, AtomTable, TraceData
from traceformat.ops import GROUP, OPS, P2P

KNOWN_INFO = {
    GROUP: {"api", "member"},
    "mesh": {"how", "shape", "dims", "ranks"},
    "redistribute": {"mesh", "mesh_shape", "src", "dst", "shape"},
}
"""Keys of an event's `info` map, by op kind (group creation) or op: what relabel knows to map
(or to leave: placements and shapes hold no ranks)."""


class RelabelError(ValueError):
    """The events cannot be relabelled exactly (a group without an image, an unknown info key)."""


def families(groups: dict[int, dict]) -> dict[int, int]:
    """gid -> family id: consecutive gids of one desc with disjoint member sets."""
    out: dict[int, int] = {}
    fam, desc, seen = -1, None, set[int]()
    for gid in sorted(groups):
        g = groups[gid]
        members = set(g["ranks"])
        if g["desc"] != desc or members & seen:
            fam, desc, seen = fam + 1, g["desc"], set()
        seen |= members
        out[gid] = fam
    return out


def group_map(groups: dict[int, dict], rank_map: np.ndarray) -> dict[int, int]:
    """gid -> gid of its image under `rank_map` in the same family (RelabelError when none)."""
    fam = families(groups)
    index = {(fam[gid], frozenset(g["ranks"])): gid for gid, g in groups.items()}
    out = {}
    for gid, g in groups.items():
        image = frozenset(int(rank_map[r]) for r in g["ranks"])
        new = index.get((fam[gid], image))
        if new is None:
            raise RelabelError(
                f"group {g['name']} ({g['desc']}, ranks {g['ranks'][:8]}) has no image among its family's groups"
            )
        out[gid] = new
    return out


def relabel(data: TraceData, src: int, dst: int, rank_map: np.ndarray) -> TraceData:
    """Rank `dst`'s events derived from rank `src`'s in `data` (a part or a trace) by `rank_map`
    (index: old global rank, value: new); a TraceData holding only `dst`, sharing `data`'s
    group table and per-event columns. RelabelError when the relabelling cannot be exact."""
    rank_map = np.asarray(rank_map)
    if int(rank_map[src]) != dst:
        raise RelabelError(f"the relabelling maps rank {src} to {int(rank_map[src])}, not {dst}")
    cols = split(data.columns[src], COLUMNS)
    gmap = group_map(data.groups, rank_map)
    table = AtomTable()
    for value in data.atoms:
        table.intern(value)
    members = {gid: g["ranks"] for gid, g in data.groups.items()}
    pat = {name: col.copy() for name, col in cols.patterns.items()}
    cache: dict[tuple, tuple] = {}
    for k in range(len(pat["op"])):
        key = tuple(int(pat[name][k]) for name in ("op", "group", "peer", "info", "splits", "in_shapes", "out_shapes"))
        new = cache.get(key)
        if new is None:
            new = cache[key] = _relabel_row(key, data.atoms, table, members, gmap, rank_map, dst)
        for name, value in zip(("group", "peer", "info", "splits", "in_shapes", "out_shapes"), new):
            pat[name][k] = value
    header = dict(data.header, ranks=[dst])
    end = data.ends.get(src)
    return TraceData(
        header=header,
        atoms=table.values,
        groups=data.groups,
        columns={dst: RankColumns(pat, cols.stream, COLUMN_NAMES)},
        ends={dst: dict(end)} if end else {},
        complete=True,
    )


def _relabel_row(key: tuple, atoms: list, table: AtomTable, members, gmap, rank_map, dst: int) -> tuple:
    op_id, gid, peer, info_id, splits_id, in_id, out_id = key
    op = OPS.get(atoms[op_id]) if op_id >= 0 else None
    name = atoms[op_id] if op_id >= 0 else None
    info = atoms[info_id] if info_id >= 0 else None
    kind = op.kind if op is not None else None
    if info is not None:
        known = KNOWN_INFO.get(kind) or KNOWN_INFO.get(name)  # type: ignore[arg-type]
        if not isinstance(info, dict) or known is None or set(info) - known:
            raise RelabelError(f"{name} event with info {str(info)[:80]}: no known way to relabel it")
    if kind == GROUP:  # every rank creates every group: same group, this rank's membership
        if info is not None and "member" in info:
            info_id = table.intern(dict(info, member=gid >= 0 and dst in members[gid]))
        return gid, peer, info_id, splits_id, in_id, out_id
    new_gid = gmap[gid] if gid >= 0 else -1
    if name == "mesh" and info is not None and "ranks" in info:
        info_id = table.intern(dict(info, ranks=sorted(int(rank_map[r]) for r in info["ranks"])))
    if peer >= 0:
        if kind == P2P or gid < 0 or peer not in members[gid]:
            peer = int(rank_map[peer])
        else:  # rooted: the same group position
            peer = members[new_gid][members[gid].index(peer)]
    if gid >= 0 and op is not None:
        perm = _positions(members[gid], members[new_gid], rank_map)
        if perm is not None:
            n = len(perm)
            if splits_id >= 0:
                s = atoms[splits_id]
                splits_id = table.intern([_permuted(side, perm, n) for side in s])
            if op.each_output and not op.coalesced:
                in_id = _permuted_atom(atoms, table, in_id, perm, n)
                out_id = _permuted_atom(atoms, table, out_id, perm, n)
    return new_gid, peer, info_id, splits_id, in_id, out_id


def _positions(old: list[int], new: list[int], rank_map) -> list[int] | None:
    """perm[j] = the old group position whose member maps to the new group's position j; None
    when the relabelling keeps every position."""
    where = {int(rank_map[r]): i for i, r in enumerate(old)}
    perm = [where[r] for r in new]
    return None if perm == list(range(len(perm))) else perm


def _permuted(values: Any, perm: list[int], n: int) -> Any:
    if isinstance(values, (list, tuple)) and len(values) == n:
        out = [values[i] for i in perm]
        return tuple(out) if isinstance(values, tuple) else out
    return values


def _permuted_atom(atoms: list, table: AtomTable, aid: int, perm: list[int], n: int) -> int:
    if aid < 0:
        return aid
    value = atoms[aid]
    new = _permuted(value, perm, n)
    return aid if new is value else table.intern(new)


def difference(a: TraceData, ra: int, b: TraceData, rb: int, skip: tuple[str, ...] = ("ts",)) -> str:
    """'' when rank `ra` of `a` and rank `rb` of `b` hold the same events on every column but
    `skip` (atoms and groups compared by value, so two traces' tables may differ in order) and
    the two group tables hold the same groups; else one line saying where they first differ."""
    ga = {(g["name"], tuple(g["ranks"]), g["desc"]) for g in a.groups.values()}
    gb = {(g["name"], tuple(g["ranks"]), g["desc"]) for g in b.groups.values()}
    if ga != gb:
        extra = sorted(ga ^ gb)[:1]
        return f"the group tables differ (e.g. {extra[0][2]} {list(extra[0][1])[:8]})"
    ca, cb = a.columns[ra], b.columns[rb]
    na, nb = len(ca["op"]), len(cb["op"])
    if na != nb:
        return f"{na} events vs {nb}"
    joint = AtomTable()
    amap = [np.array([joint.intern(_canon(v)) for v in t.atoms] + [-1], dtype=np.int64) for t in (a, b)]
    gids: dict[tuple, int] = {}
    gmap = []
    for t in (a, b):
        top = max(t.groups, default=-1)
        m = np.full(top + 2, -1, dtype=np.int64)
        for gid, g in t.groups.items():
            m[gid] = gids.setdefault((g["name"], tuple(g["ranks"]), g["desc"]), len(gids))
        gmap.append(m)
    for name in COLUMN_NAMES:
        if name in skip:
            continue
        xa, xb = np.asarray(ca[name]), np.asarray(cb[name])
        if name in ATOM_COLUMNS:
            xa, xb = amap[0][xa], amap[1][xb]
        elif name == "group":
            xa, xb = gmap[0][xa], gmap[1][xb]
        bad = np.flatnonzero(xa != xb)
        if len(bad):
            i = int(bad[0])
            return (
                f"column {name} differs at event {i} ({a.atoms[ca['op'][i]]}): "
                f"{_show(a, ca, name, i)} vs {_show(b, cb, name, i)}"
            )
    ea, eb = a.ends.get(ra, {}), b.ends.get(rb, {})
    if ea.get("status") != eb.get("status"):
        return f"end status {ea.get('status')} vs {eb.get('status')}"
    return ""


def _canon(value: Any) -> Any:
    """Lists and tuples alike (a value read back from msgpack is a list)."""
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    return value


def _show(t: TraceData, cols, name: str, i: int) -> str:
    v = int(cols[name][i])
    if name in ATOM_COLUMNS:
        return str(t.atoms[v] if v >= 0 else None)[:80]
    if name == "group" and v >= 0:
        g = t.groups[v]
        return f"{g['desc']} {g['ranks'][:8]}"
    return str(v)


__all__ = ["RelabelError", "difference", "families", "group_map", "relabel"]
