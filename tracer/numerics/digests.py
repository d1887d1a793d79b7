"""Digests of tensor values made from every simulated rank's shard, in this process, without a
collective (local mode's numerics, tracer/numerics/hooks.py): each rank's plain value, the
sibling meshes of a DTensor's submesh, Partial shards reduced elementwise, and the (sum, sum of
squares, max |x|) digests of them, added up over disjoint parts."""

from __future__ import annotations

import torch
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed._local_tensor import LocalTensor

from tracer.numerics.digest_math import Digest, flat_ranks


def rank_values(t, world: int) -> dict[int, torch.Tensor]:
    """Each rank's plain value: a LocalTensor's shards, or the same tensor on every rank."""
    while isinstance(t, AsyncCollectiveTensor):  # a functional collective's result: LocalTensor computed it already
        t = t.elem
    if isinstance(t, LocalTensor):
        return dict(t._local_tensors)
    return dict.fromkeys(range(world), t)


def mesh_grid(mesh_tensor) -> list:
    """The mesh's global ranks as nested lists (a LocalTensor mesh holds the same on every rank)."""
    if isinstance(mesh_tensor, LocalTensor):
        mesh_tensor = next(iter(mesh_tensor._local_tensors.values()))
    return mesh_tensor.tolist()


def sibling_grids(mesh, grid: list, world: int) -> list:
    """The mesh as rank 0 sees it, then the sibling meshes of the other ranks (LocalTensorMode
    gives every rank rank 0's mesh tensor): rank 0's grid shifted by the offsets of its dims'
    sibling groups, each kept where it lies in the world and overlaps none before it."""
    from torch.distributed._local_tensor import _c10d as local_c10d

    flat = flat_ranks(grid)
    offsets: set[int] = set()
    for i in range(mesh.ndim):
        try:
            _, offs, _ = local_c10d._prepare_collective_groups(mesh.get_group(i))
        except Exception:  # a mesh dim without its own group: no siblings known
            continue
        offsets.update(int(o) for o in offs)
    grids, taken = [grid], set(flat)
    for o in sorted(offsets):
        moved = {r + o for r in flat}
        if o == 0 or max(moved) >= world or taken & moved:
            continue
        grids.append(shifted(grid, o))
        taken |= moved
    return grids


def shifted(grid, by: int):
    """Python lists, not a tensor: a tensor made under LocalTensorMode is a LocalTensor."""
    return [shifted(g, by) for g in grid] if isinstance(grid, list) else int(grid) + by


def reduce_partial(members: list[torch.Tensor], placements: list) -> torch.Tensor:
    """Partial shards reduced elementwise, as the pending all-reduce would."""
    ops = {getattr(p, "reduce_op", "sum") for p in placements}
    x = torch.stack([m.double() for m in members])
    if ops <= {"sum"}:
        return x.sum(0)
    if ops <= {"avg"}:
        return x.mean(0)
    if ops <= {"max"}:
        return x.amax(0)
    if ops <= {"min"}:
        return x.amin(0)
    return x.sum(0)


def digests_of(ts: list[torch.Tensor]) -> list[Digest]:
    """The digest of each tensor (one stacked reduction when they have the same shape)."""
    if not ts:
        return []
    if all(t.shape == ts[0].shape for t in ts) and ts[0].numel() > 0 and len(ts) > 1:
        x = torch.stack([t.detach().reshape(-1) for t in ts]).double()
        sums, sqs, amaxs = x.sum(1).tolist(), (x * x).sum(1).tolist(), x.abs().amax(1).tolist()
        return list(zip(sums, sqs, amaxs))
    out = []
    for t in ts:
        if t.numel() == 0:
            out.append((0.0, 0.0, 0.0))
            continue
        x = t.detach().double()
        out.append((float(x.sum()), float((x * x).sum()), float(x.abs().max())))
    return out
