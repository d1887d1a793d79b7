"""Real mode's numerics: every rank's own digests (per_rank.py) combined into the numerics
records local mode writes (hooks.py), by the same rules (docs/numerics.md), when `tracer record`
merges the parts. Torch-free: digests add up, only a Partial value's elements are reduced.

Rows of one value are those of the ranks that hold it, matched by (phase, what, name, the how
many-th of its name on that rank in the step): a pipeline stage's parameter is only on the
stage's ranks, so it is a replica among them, neither a shard nor missing elsewhere.
- a DTensor (a mesh and placements): per mesh, its shards' digests add up, one copy of a
  Replicate dim, a Partial dim's elements reduced first; across sibling meshes (a tp mesh of each
  dp replica) an activation's distinct values are parts, a parameter's one copy that must agree.
- a plain value: identical on every rank, one copy; a parameter's or gradient's, a replica
  (the lowest rank's is the global one, every rank's digest kept to check) unless its ranks
  started different at the first forward (their own: parts); an activation's distinct values
  are parts of the global one.
- the loss: the mean of the distinct losses (analyzer/checks/numerics_parity.py decides mean or
  sum against the reference); the gradient norm, from the combined gradients.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from traceformat import numerics as fmt
from tracer.numerics.digest_math import Digest, add_up, flat_ranks, rank_at, ranks_dict

_PHASES = {p: i for i, p in enumerate(fmt.PHASES)}
_REDUCE: dict[str, Callable[..., np.ndarray]] = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min}


def combine(records: list[dict]) -> list[dict]:
    """Numerics records (one per step) from every rank's rank records."""
    rows_by_step: dict[int, list[dict]] = {}
    for rec in sorted(records, key=lambda r: (r["step"], r["rank"])):
        c = rec["c"]
        rows_by_step.setdefault(rec["step"], []).extend(
            dict(zip(fmt.RANK_FIELD_NAMES, values), rank=rec["rank"])
            for values in zip(*[c[n] for n in fmt.RANK_FIELD_NAMES])
        )
    own = _own(rows_by_step)
    return [fmt.record(step, _step(rows, own)) for step, rows in sorted(rows_by_step.items())]


def _own(rows_by_step: dict[int, list[dict]]) -> set[str]:
    """Plain parameters whose ranks held different values at the first forward (each its own)."""
    first: dict[str, set[Digest]] = {}
    for rows in rows_by_step.values():
        for r in rows:
            if r["what"] == "init":
                first.setdefault(r["name"], set()).add(_digest(r))
    return {name for name, ds in first.items() if len(ds) > 1}


def _step(rows: list[dict], own: set[str]) -> dict[str, list]:
    values: dict[tuple, list[dict]] = {}
    seen: dict[tuple, int] = {}
    for r in rows:
        if r["what"] == "init":
            continue
        name_key = (r["rank"], r["phase"], r["what"], r["name"], r["chunk"])
        occ = seen[name_key] = seen.get(name_key, -1) + 1
        values.setdefault((r["phase"], r["what"], r["name"], occ), []).append(r)
    cols: dict[str, list] = {name: [] for name in fmt.FIELD_NAMES}
    out = [_microbatches(members, own) for members in values.values()]
    grads = [row for row in out if row["what"] == "grad" and not row["layout"].startswith(fmt.UNMAPPED_LAYOUT)]
    if grads:  # local mode writes it before the step's parameters: after the last backward value
        total = sum(g["sumsq"] for g in grads)
        norm = math.sqrt(total)
        dtype = grads[-1]["dtype"]
        out.append(_out("backward", "grad_norm", "", dtype, [], 1, (norm, total, norm), "norm", None))
    out.sort(key=lambda row: _PHASES.get(row["phase"], len(_PHASES)))  # stable: execution order within a phase
    for row in out:
        for name in fmt.FIELD_NAMES:
            cols[name].append(row[name])
    return cols


def _microbatches(members: list[dict], own: set[str]) -> dict:
    """A value of a pipeline stage's microbatches (chunk >= 0) is each microbatch's value by the
    rules below, joined: an activation's are parts of the batch's, the loss their mean (the
    analyzer's mean-or-sum rule then applies to it as to data parallel's losses)."""
    chunks: dict[int, list[dict]] = {}
    for m in members:
        chunks.setdefault(m["chunk"], []).append(m)
    if len(chunks) == 1 and -1 in chunks:
        return _value(members, own)
    per = [_value(ms, own) for _, ms in sorted(chunks.items())]
    first, k = per[0], len(per)
    if first["what"] == "loss":
        mean = sum(p["sum"] for p in per) / k
        d: Digest = (mean, mean * mean, abs(mean))
        return _out(first["phase"], "loss", "", first["dtype"], [], 1, d, f"mean of {k}", None)
    d = add_up([(p["sum"], p["sumsq"], p["amax"]) for p in per])
    numel = sum(p["numel"] for p in per)
    layout = f"{first['layout']} x{k} microbatches"
    return _out(first["phase"], first["what"], first["name"], first["dtype"], None, numel, d, layout, None)


def _value(members: list[dict], own: set[str]) -> dict:
    first = members[0]
    phase, what, name, dtype = first["phase"], first["what"], first["name"], first["dtype"]
    ranks = [m["rank"] for m in members]
    per = [_digest(m) for m in members]
    if what == "loss":
        distinct = sorted({d[0] for d in per})  # tp / cp replicas of one loss count once
        mean = sum(distinct) / len(distinct)
        return _out(phase, what, name, dtype, [], 1, (mean, mean * mean, abs(mean)), f"mean of {len(distinct)}", None)
    if first["layout"].startswith(fmt.UNMAPPED_LAYOUT):  # each rank's may be its own part: no replicas
        return _out(phase, what, name, dtype, None, first["numel"], per[0], first["layout"], None)
    if first["mesh"] is not None:
        return _dtensor(members)
    part_of = first["part_of"] or name in own
    classes = list(dict.fromkeys(per))
    if part_of:
        if len(classes) == 1:
            return _out(phase, what, name, dtype, first["shape"], first["numel"], per[0], "plain", None)
        firsts = [members[per.index(d)] for d in classes]
        numel = sum(m["numel"] for m in firsts)
        return _out(phase, what, name, dtype, None, numel, add_up(classes), f"plain x{len(classes)}", None)
    replicated = ranks_dict([ranks], ranks, per) if len(ranks) > 1 else None
    return _out(phase, what, name, dtype, first["shape"], first["numel"], per[0], "plain", replicated)


def _dtensor(members: list[dict]) -> dict:
    """As hooks.Numerics._dtensor, from the ranks' rows: one grid per mesh the rows name."""
    first = members[0]
    placements: list[str] = first["placements"]
    part_of = first["part_of"]
    by_rank = {m["rank"]: m for m in members}
    grids = list({tuple(flat_ranks(m["mesh"])): m["mesh"] for m in members}.values())
    shape = _grid_shape(grids[0])
    partial = [i for i, p in enumerate(placements) if p.startswith("P")]
    replicate = [i for i, p in enumerate(placements) if p == "R"]
    per_grid: list[Digest] = []
    for grid in grids:
        fixed = [range(1) if i in partial or i in replicate else range(n) for i, n in enumerate(shape)]
        pieces: list[Digest] = []
        for c in itertools.product(*fixed):
            if not partial:
                rank = rank_at(grid, c)
                if rank in by_rank:
                    pieces.append(_digest(by_rank[rank]))
                continue
            at = [rank_at(grid, _with(c, partial, pc)) for pc in itertools.product(*[range(shape[i]) for i in partial])]
            pieces.append(_reduced([by_rank[r] for r in at if r in by_rank], [placements[i] for i in partial]))
        per_grid.append(add_up(pieces))
    distinct = list(dict.fromkeys(per_grid))
    layout = ",".join(placements)
    numel, out_shape = first["numel"], first["shape"]
    d = per_grid[0]
    if len(distinct) > 1 and part_of:
        d, numel, out_shape = add_up(distinct), numel * len(distinct), None
        layout += f" x{len(distinct)}"
    keys: dict[tuple, list[int]] = {}
    for k, grid in enumerate(grids):
        for c in itertools.product(*[range(n) for n in shape]):
            key = tuple(0 if i in replicate else v for i, v in enumerate(c))
            rank = rank_at(grid, c)
            if rank in by_rank:
                keys.setdefault(key if not part_of else (k, *key), []).append(rank)
    groups = [sorted(g) for g in keys.values() if len(g) > 1]
    per_rank = None
    if groups:
        ranks = sorted(r for g in groups for r in g)
        per_rank = ranks_dict(groups, ranks, [_digest(by_rank[r]) for r in ranks])
    return _out(first["phase"], first["what"], first["name"], first["dtype"], out_shape, numel, d, layout, per_rank)


def _reduced(members: list[dict], placements: list[str]) -> Digest:
    """Partial shards reduced elementwise, as the pending all-reduce would, then digested."""
    if not members or any(m["raw"] is None for m in members):
        return add_up([_digest(m) for m in members])  # no elements kept: the sum still adds up
    ops = {p[2:-1] or "sum" for p in placements}
    reduce = _REDUCE.get(ops.pop(), np.sum) if len(ops) == 1 else np.sum
    x = reduce(np.stack([np.frombuffer(m["raw"], dtype="<f8") for m in members]), axis=0)
    if x.size == 0:
        return (0.0, 0.0, 0.0)
    return (float(x.sum()), float((x * x).sum()), float(np.abs(x).max()))


def _with(c: tuple, dims: list[int], values: tuple) -> tuple:
    out = list(c)
    for i, v in zip(dims, values):
        out[i] = v
    return tuple(out)


def _grid_shape(grid) -> list[int]:
    shape = []
    while isinstance(grid, list):
        shape.append(len(grid))
        grid = grid[0]
    return shape


def _digest(row: dict) -> Digest:
    return (float(row["sum"]), float(row["sumsq"]), float(row["amax"]))


def _out(phase, what, name, dtype, shape, numel, d: Digest, layout, ranks) -> dict:
    return {
        "phase": phase,
        "what": what,
        "name": name,
        "dtype": dtype,
        "shape": shape,
        "numel": int(numel),
        "sum": float(d[0]),
        "sumsq": float(d[1]),
        "amax": float(d[2]),
        "layout": layout,
        "ranks": ranks,
    }
