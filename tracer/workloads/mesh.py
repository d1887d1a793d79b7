"""The job's DeviceMeshes, built as TorchTitan 0.3 builds them (ParallelDims.build_mesh, with
FSDP's dim named `fsdp`).

A 1-D "world" mesh is unflattened into the data-loading mesh (pp, batch, cp, tp), whose batch x
cp flatten into "loss_mesh"; into the dense mesh (pp, dp_replicate, fsdp, tp); and into the
sparse mesh (pp, dp_replicate, efsdp, ep), efsdp = fsdp * tp / ep. Every dim exists even at
size 1 (TorchTitan creates them all; FSDP always runs on `fsdp`, at size 1 only to apply its
mixed precision), so group creation reads like TorchTitan's. pp and tp come from the
data-loading mesh, fsdp and dp_replicate from the dense one, ep and efsdp from the sparse one.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from tracer.config import JobConfig


@dataclass(kw_only=True, slots=True)
class Meshes:
    world: DeviceMesh
    """The 1-D mesh every other is an unflattening of."""
    dense: DeviceMesh
    """(pp, dp_replicate, fsdp, tp): every dim, size 1 included."""
    fsdp: DeviceMesh
    """FSDP for non-expert parameters: `fsdp` (1-D), or (dp_replicate, fsdp) for HSDP."""
    batch: DeviceMesh
    """The data-parallel ranks (dp_replicate x fsdp): the global token count is summed over it."""
    loss: DeviceMesh
    """batch x cp flattened: logged losses are reduced over it."""
    pp: DeviceMesh | None = None
    """Pipeline ranks (None when pp is 1)."""
    tp: DeviceMesh | None = None
    """Tensor parallel ranks (None when tp is 1)."""
    ep: DeviceMesh | None = None
    """Expert parallel ranks (None when ep is 1)."""
    expert_fsdp: DeviceMesh | None = None
    """FSDP for expert parameters under expert parallel: efsdp, or (dp_replicate, efsdp)."""

    @property
    def dp_enabled(self) -> bool:
        return self.batch.size() > 1


def build(cfg: JobConfig) -> Meshes:
    p = cfg.parallelism
    pp, rep, shard = p.pipeline_parallel_degree, p.data_parallel_replicate_degree, p.data_parallel_shard_degree
    tp, ep = p.tensor_parallel_degree, p.expert_parallel_degree
    world = init_device_mesh("cpu", (cfg.world_size,), mesh_dim_names=("world",))
    loading = world._unflatten(0, (pp, rep * shard, 1, tp), ("pp", "batch", "cp", "tp"))
    loss = loading["batch", "cp"]._flatten("loss_mesh")
    dense = world._unflatten(0, (pp, rep, shard, tp), ("pp", "dp_replicate", "fsdp", "tp"))
    sparse = world._unflatten(0, (pp, rep, shard * tp // ep, ep), ("pp", "dp_replicate", "efsdp", "ep"))
    rep_dim = ("dp_replicate",) if rep > 1 else ()
    m = Meshes(world=world, dense=dense, fsdp=dense[rep_dim + ("fsdp",)], batch=loading["batch"], loss=loss,
               pp=loading["pp"] if pp > 1 else None, tp=loading["tp"] if tp > 1 else None)
    if ep > 1:
        m.ep = sparse["ep"]
        m.expert_fsdp = sparse[rep_dim + ("efsdp",)]
    return m


def dp_rank(m: Meshes):
    """This rank's data-parallel index (a per-rank value under LocalTensorMode): ranks that
    share it see the same batch."""
    return m.batch.get_local_rank()
