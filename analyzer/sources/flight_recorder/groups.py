"""Process groups of a set of FR dumps: from `pg_config`, or inferred from the entries.

NCCL dumps list every group the rank knows in `pg_config` (name, desc, global member ranks).
gloo writes an empty placeholder, so there a group is inferred: its members are the ranks whose
entries name it. That misses members that left no dump (a dead rank), so the world is also
read off the default group's all-gathers (FR records their output as `[group size, *input]`):
the default group is then every rank of the world, and a rank with no dump is a missing member.
A subgroup whose all-gathers show more members than the dumps name gets a note (which ranks
are missing cannot be known without pg_config).
"""

from __future__ import annotations

from collections import defaultdict


def _name_order(name: str):
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def build_groups(used: dict[int, list[int]], configs: dict[int, list], pgs: dict, hints: dict[int, int]) -> tuple:
    """(groups {gid: {gid, name, ranks, desc}}, {rank: {pg key id: gid}}, world size, notes), from
    the pg key ids each rank's entries name (`used`), its pg_config, and the group size each pg
    key's all-gathers show (`hints`: window.size_hints, the largest over ranks)."""
    notes: list[str] = []
    key_of = {i: k for k, i in pgs.items()}  # pg key id -> (name, desc)
    configured: dict[tuple, str] = {}  # (name, members) -> desc
    # every rank's pg_config repeats the same member tuples (the world's: 16k ranks long, the
    # same object where one process parsed them): hash each object once, not once per rank
    seen_objects: set[tuple[str, int]] = set()
    for listed in configs.values():
        for name, desc, members in listed:
            if (name, id(members)) not in seen_objects:
                seen_objects.add((name, id(members)))
                configured.setdefault((name, members), desc)
    cfg = sorted(configured, key=lambda k: (_name_order(k[0]), k[1]))
    member_sets = {k: frozenset(k[1]) for k in cfg}
    gid_cfg = {k: i for i, k in enumerate(cfg)}
    by_name: dict[str, list[tuple]] = defaultdict(list)
    for k in cfg:
        by_name[k[0]].append(k)
    gid_of: dict[int, dict[int, int]] = {r: {} for r in used}
    unresolved: dict[tuple, set[int]] = defaultdict(set)  # (name, desc) -> ranks naming it
    for rank, keys in used.items():
        for pk in keys:
            name = key_of[pk][0]
            own = [k for k in by_name.get(name, ()) if rank in member_sets[k]]
            if own:
                gid_of[rank][pk] = gid_cfg[own[0]]
            else:
                unresolved[key_of[pk]].add(rank)
    dumped = max(used) + 1
    world = max([dumped] + [max(m) + 1 for _, m in cfg])
    for name, desc in unresolved:
        if _is_default(name, desc):
            world = max(world, max((hints.get(pk, 0) for pk, k in key_of.items() if k == (name, desc)), default=0))
    groups = {gid_cfg[k]: {"gid": gid_cfg[k], "name": k[0], "ranks": list(k[1]), "desc": configured[k]} for k in cfg}
    next_gid = len(cfg)
    for (name, desc), seen in sorted(unresolved.items(), key=lambda kv: (_name_order(kv[0][0]), kv[0][1])):
        members = list(range(world)) if _is_default(name, desc) else sorted(seen)
        groups[next_gid] = {"gid": next_gid, "name": name, "ranks": members, "desc": desc or "undefined"}
        pk = pgs[(name, desc)]
        for rank in seen:
            gid_of[rank][pk] = next_gid
        hint = hints.get(pk, 0)
        if not _is_default(name, desc) and hint > len(members):
            notes.append(
                f"group {name} ({desc}): its all-gathers show {hint} members, but only ranks "
                f"{', '.join(map(str, members))} left dumps that name it"
            )
        next_gid += 1
    if unresolved:
        notes.append(
            f"{len(unresolved)} process group{'s' if len(unresolved) > 1 else ''} inferred from the "
            "entries (the dumps' pg_config is empty, as gloo leaves it)"
        )
    return groups, gid_of, world, notes


def _is_default(name: str, desc: str) -> bool:
    return desc == "default_pg" or (name == "0" and desc in ("", "undefined"))
