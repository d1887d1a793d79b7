"""Make FSDP2 (fully_shard) run under LocalTensorMode (torch 2.13).

Out of the box FSDP2 fails there at `free_storage` (resize_() on a LocalTensor, which has no
storage of its own) and, once that is fixed, silently keeps rank 0's shard on every simulated
rank (it takes its shard rank from ProcessGroup.rank(), which is 0 in the one process). The
patches below fix both; all are no-ops for plain tensors and outside LocalTensorMode.
FSDP with its gradient division switched off (set_gradient_divide_factor(1.0), as TorchTitan
does) reduce-scatters with PREMUL_SUM(1.0), which LocalTensor does not implement; it is summed
(exact for a factor of 1; any other factor is refused with a one-line error).
Limitation: a parameter too small to give every rank a non-empty shard is refused (FSDP
branches in Python on `numel() > 0`, which would differ per rank).
"""

import torch

from tracer.capture.patches import Patcher
from tracer.modes import OTHER_MODES


def _lt_cls():
    from torch.distributed._local_tensor import LocalTensor

    return LocalTensor


def _local_int_map(i):
    """SymInt backed by LocalIntNode -> {rank: int}; otherwise None."""
    from torch.distributed._local_tensor import LocalIntNode

    if isinstance(i, torch.SymInt) and isinstance(i.node, LocalIntNode):
        return dict(i.node._local_ints)
    return None


class _RankIndexableChunks(list):
    """List of chunks that can be indexed by a per-rank SymInt (LocalIntNode).

    chunks[shard_rank] with shard_rank = {r: k_r} returns a LocalTensor whose rank-r
    entry is rank r's view of chunk k_r.
    """

    def __getitem__(self, idx):
        per_rank = _local_int_map(idx)
        if per_rank is None:
            if isinstance(idx, torch.SymInt) and idx.node.maybe_as_int() is not None:
                # LocalTensorMode(1): the one rank's shard index is a constant node, which has
                # no int_() for __index__ (torch 2.13)
                idx = idx.node.maybe_as_int()
            return super().__getitem__(idx)
        from torch.distributed._local_tensor import enabled_local_tensor_mode

        LocalTensor = _lt_cls()
        out = {}
        for r, k in per_rank.items():
            c = list.__getitem__(self, k)
            c = c._local_tensors[r] if isinstance(c, LocalTensor) else c
            # FSDP only reads these chunks (copies them into the padded shard);
            # LocalTensor forbids inner tensors that require grad.
            out[r] = c.detach()
        numels = {r: t.numel() for r, t in out.items()}
        if 0 in numels.values() and any(numels.values()):
            # FSDP branches in Python on `chunk.numel() > 0`, which is rank-divergent here.
            raise NotImplementedError(
                "FSDP under LocalTensorMode: some ranks would hold an empty shard "
                f"(per-rank numel {numels}); use shard dims >= shard world size"
            )
        lm = enabled_local_tensor_mode()
        if lm is None:
            return LocalTensor(out)
        with lm.disable():
            return LocalTensor(out)


def install(p: Patcher) -> None:
    from torch.distributed._local_tensor import enabled_local_tensor_mode
    from torch.distributed.fsdp._fully_shard import _fsdp_common, _fsdp_param, _fsdp_param_group

    LocalTensor = _lt_cls()

    # (1)+(2) storage resize on the LocalTensor wrapper (no real storage) ->
    # resize each rank's local tensor storage instead.
    orig_alloc, orig_free = _fsdp_param.alloc_storage, _fsdp_param.free_storage

    def alloc_storage(tensor):
        if isinstance(tensor, LocalTensor):
            for t in tensor._local_tensors.values():
                orig_alloc(t)
        else:
            orig_alloc(tensor)

    def free_storage(tensor):
        if isinstance(tensor, LocalTensor):
            for t in tensor._local_tensors.values():
                orig_free(t)
        else:
            orig_free(tensor)

    for mod in (_fsdp_param, _fsdp_param_group):
        if hasattr(mod, "alloc_storage"):
            p.set(mod, "alloc_storage", alloc_storage)
        if hasattr(mod, "free_storage"):
            p.set(mod, "free_storage", free_storage)

    # (3) shard rank: FSDP takes it from ProcessGroup.rank(), which the fake PG
    # answers with the single real rank (0) -> every simulated rank would keep
    # chunk 0 (silently wrong parameters). Use DeviceMesh.get_local_rank, which
    # LocalTensorMode patches to return a per-rank SymInt.
    for cls, attr, dim_attr in (
        (_fsdp_common.FSDPMeshInfo, "shard_mesh_rank", "shard_mesh_dim"),
        (_fsdp_common.DDPMeshInfo, "replicate_mesh_rank", "replicate_mesh_dim"),
    ):
        orig_post_init = cls.__post_init__

        def __post_init__(self, _orig=orig_post_init, _cls=cls, _attr=attr, _dim=dim_attr):
            _orig(self)
            # MRO: HSDPMeshInfo -> FSDPMeshInfo -> DDPMeshInfo; fix up both attrs
            if enabled_local_tensor_mode() is not None and getattr(self, _dim, None) is not None:
                setattr(self, _attr, self.mesh.get_local_rank(getattr(self, _dim)))

        p.set(cls, "__post_init__", __post_init__)

    # (4) ... which FSDP uses as `chunks[shard_rank]`: make the chunk list
    # indexable by that per-rank SymInt.
    orig_chunk = _fsdp_param._chunk_with_empty

    def _chunk_with_empty(tensor, num_chunks, dim):
        return _RankIndexableChunks(orig_chunk(tensor, num_chunks, dim))

    p.set(_fsdp_param, "_chunk_with_empty", _chunk_with_empty)

    # (5) plain (non-LocalTensor) parameters under LocalTensorMode, e.g. a model
    # built before entering the mode: treat them as replicated on every rank,
    # otherwise the plain padded shard can't take per-rank narrow() lengths.
    orig_init_sharded = _fsdp_param.FSDPParam._init_sharded_param
    if not getattr(orig_init_sharded, "_local_tensor_patched", False):
        from torch.distributed.tensor import DTensor

        def _init_sharded_param(self, param, *args, **kwargs):
            lm = enabled_local_tensor_mode()
            if lm is not None and type(param.data) is torch.Tensor and not isinstance(param, DTensor):
                with lm.disable():
                    lt = LocalTensor({r: param.detach() for r in lm.ranks})
                param = torch.nn.Parameter(lt, requires_grad=param.requires_grad)
            return orig_init_sharded(self, param, *args, **kwargs)

        _init_sharded_param._local_tensor_patched = True  # type: ignore[attr-defined]
        p.set(_fsdp_param.FSDPParam, "_init_sharded_param", _init_sharded_param)

    # (6) PREMUL_SUM: LocalTensor's reduction raises on it (the factor does not reach it).
    # FSDP asks for it with the factor 1 / gradient_divide_factor: a factor of 1 is a plain sum.
    from torch.distributed import ReduceOp
    from torch.distributed._local_tensor import _c10d as local_c10d
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives

    orig_reduce, orig_factors = (local_c10d._local_reduce, _fsdp_collectives._get_gradient_divide_factors)

    def _local_reduce(reduce_op, tensors):
        if reduce_op == ReduceOp.PREMUL_SUM or reduce_op == "premul_sum":
            reduce_op = ReduceOp.SUM  # the factor is 1: checked below, where FSDP picks it
        return orig_reduce(reduce_op, tensors)

    def _get_gradient_divide_factors(*args, **kwargs):
        out = orig_factors(*args, **kwargs)
        factor = kwargs.get("factor", args[4] if len(args) > 4 else None)
        if enabled_local_tensor_mode() is not None and factor not in (None, 1.0) and out[2] != ReduceOp.AVG:
            raise RuntimeError(
                f"local mode: FSDP gradient_divide_factor {factor} reduces with a scaled "
                f"PREMUL_SUM, which LocalTensor cannot apply (record with {OTHER_MODES})"
            )
        return out

    p.set(local_c10d, "_local_reduce", _local_reduce)
    p.set(_fsdp_collectives, "_get_gradient_divide_factors", _get_gradient_divide_factors)
