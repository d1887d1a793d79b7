"""FSDP2 (fully_shard) and HSDP, wrapped as TorchTitan 0.3's apply_fsdp_to_decoder wraps llama3.

Units, in TorchTitan's order: tok_embeddings, [norm, output] together, each transformer block,
then the root (which holds no parameters of its own, so it only schedules). FSDP always runs,
on a size-1 `fsdp` mesh too: there it only applies the mixed precision (parameters gathered in
`param_dtype`, gradients reduced in `reduce_dtype`). Gradient division is switched off
(TorchTitan divides the loss by the global token count instead), so reductions are sums.
With expert parallel, a block's expert weights shard over `efsdp` and the rest over `fsdp`
inside the block's one unit (a per-parameter mesh, TorchTitan's shard_placement_fn).
A 2-D mesh (dp_replicate, fsdp) makes it HSDP: all-gathers and reduce-scatters on the shard
dim, gradients all-reduced across replicas.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Shard

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def reshard_policy(policy: str | bool, pp_enabled: bool) -> bool:
    """TorchTitan's fsdp_reshard_after_forward: "default" keeps parameters gathered after
    forward under pipelining (a stage runs forward once per microbatch)."""
    if isinstance(policy, bool):
        return policy
    return {"always": True, "never": False}.get(policy, not pp_enabled)


def apply(model: nn.Module, mesh: DeviceMesh, *, policy: str | bool, pp_enabled: bool, param_dtype: str,
          reduce_dtype: str, expert_mesh: DeviceMesh | None = None) -> None:
    mp = MixedPrecisionPolicy(param_dtype=DTYPES[param_dtype], reduce_dtype=DTYPES[reduce_dtype],
                              cast_forward_inputs=False)
    reshard = reshard_policy(policy, pp_enabled)
    kw = {"mesh": mesh, "mp_policy": mp}
    if model.tok_embeddings is not None:
        fully_shard(model.tok_embeddings, **kw, reshard_after_forward=reshard)
    if model.norm is not None and model.output is not None:
        # backward needs them first: kept gathered unless the policy is "always"
        fully_shard([model.norm, model.output], **kw, reshard_after_forward=policy in ("always", True))
    for block in model.layers.values():
        extra = {}
        if expert_mesh is not None and _moe(block) is not None:
            extra["shard_placement_fn"] = _expert_placement(_moe(block).experts, expert_mesh, mesh)
        fully_shard(block, **kw, reshard_after_forward=reshard, **extra)
    fully_shard(model, **kw)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)


def _moe(block: nn.Module):
    """The block's MoE (through an activation-checkpoint wrapper, if any), or None."""
    inner = getattr(block, "_checkpoint_wrapped_module", block)
    return getattr(inner, "moe", None)


def _expert_placement(experts: nn.Module, expert_mesh: DeviceMesh, mesh: DeviceMesh):
    """Expert weights on `efsdp`, Shard(1) when efsdp x ep exceeds the experts (TorchTitan's
    padding avoidance), everything else Shard(0) on the dense FSDP mesh."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import ShardPlacementResult
    from torch.distributed.fsdp._fully_shard._fsdp_init import _get_mesh_info

    params = set(experts.parameters())
    ep = next(iter(params)).device_mesh.size() if hasattr(next(iter(params)), "device_mesh") else 1
    n_experts = next(iter(params)).shape[0]
    placement = Shard(1) if expert_mesh["efsdp"].size() * ep > n_experts else Shard(0)
    expert_info, dense_info = _get_mesh_info(expert_mesh), _get_mesh_info(mesh)

    def place(param: nn.Parameter):
        if param in params:
            return ShardPlacementResult(placement=placement, mesh_info=expert_info)
        return ShardPlacementResult(placement=Shard(0), mesh_info=dense_info)

    return place
