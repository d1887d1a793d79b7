"""One DeviceMesh for the whole job, with TorchTitan's dim names.

Only dims with a degree above 1 exist (as in TorchTitan), except the FSDP dim, which exists
whenever any data parallelism does. Expert parallel borrows ranks from dp_shard (TorchTitan's
"dp2ep"): dp_shard splits into dp_shard_mod_ep x dp_shard_in_ep, flattened back into
dp_shard_cp for the non-expert parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from tracer.config import JobConfig


@dataclass(kw_only=True, slots=True)
class Meshes:
    world: DeviceMesh
    """The one mesh every other is a slice or flattening of."""
    pp: DeviceMesh | None = None
    """Pipeline ranks."""
    tp: DeviceMesh | None = None
    """Tensor parallel ranks."""
    fsdp: DeviceMesh | None = None
    """FSDP for non-expert parameters: 1-D (FSDP) or 2-D (dp_replicate, shard) for HSDP."""
    ep: DeviceMesh | None = None
    """Expert parallel ranks."""
    expert_fsdp: DeviceMesh | None = None
    """FSDP for expert parameters: what dp_shard leaves after expert parallel."""


def build(cfg: JobConfig) -> Meshes:
    p = cfg.parallelism
    rep, shard, ep = p.data_parallel_replicate_degree, p.data_parallel_shard_degree, p.expert_parallel_degree
    dims: list[tuple[str, int]] = []
    if p.pipeline_parallel_degree > 1:
        dims.append(("pp", p.pipeline_parallel_degree))
    if rep > 1:
        dims.append(("dp_replicate", rep))
    has_dp = rep > 1 or shard > 1
    if ep > 1:
        dims += [("dp_shard_mod_ep", shard // ep), ("dp_shard_in_ep", ep)]
    elif has_dp:
        dims.append(("dp_shard", shard))
    if p.tensor_parallel_degree > 1:
        dims.append(("tp", p.tensor_parallel_degree))
    if not dims:
        dims.append(("dp_shard", 1))
    names = tuple(n for n, _ in dims)
    world = init_device_mesh("cpu", tuple(d for _, d in dims), mesh_dim_names=names)
    m = Meshes(world=world)
    if "pp" in names:
        m.pp = world["pp"]
    if "tp" in names:
        m.tp = world["tp"]
    rep_dim = ("dp_replicate",) if rep > 1 else ()
    if ep > 1:
        world[("dp_shard_mod_ep", "dp_shard_in_ep")]._flatten("dp_shard_cp")
        m.fsdp = world[rep_dim + ("dp_shard_cp",)]
        m.ep = world["dp_shard_in_ep"]
        m.expert_fsdp = world[rep_dim + ("dp_shard_mod_ep",)]
    elif has_dp:
        m.fsdp = world[rep_dim + ("dp_shard",)]
    return m


def dp_rank(m: Meshes):
    """This rank's data-parallel index (a per-rank value under LocalTensorMode): ranks that
    share it see the same batch."""
    names = m.world.mesh_dim_names
    index, size = 0, 1
    for name in reversed(names):
        if name in ("pp", "tp"):
            continue
        index = index + m.world.get_local_rank(name) * size
        size *= m.world.size(names.index(name))
    return index
