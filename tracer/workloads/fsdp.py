"""FSDP2 (fully_shard) and HSDP, wrapped as TorchTitan wraps llama3.

Units: tok_embeddings, each transformer block, [norm, output] together, then the root (which
holds no parameters of its own, so it only schedules). With expert parallel, each block's
experts are their own unit on the mesh dp_shard leaves after ep (TorchTitan's dp2ep).
A 2-D mesh (dp_replicate, shard) makes it HSDP: all-gathers and reduce-scatters on the shard
dim, gradients all-reduced across replicas.
"""

from __future__ import annotations

import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard


def reshard_policy(policy: str | bool, pp_enabled: bool) -> bool:
    """TorchTitan's fsdp_reshard_after_forward: "default" keeps parameters gathered after
    forward under pipelining (a stage runs forward once per microbatch)."""
    if isinstance(policy, bool):
        return policy
    return {"always": True, "never": False}.get(policy, not pp_enabled)


def apply(model: nn.Module, mesh: DeviceMesh, *, reshard: bool, last_reshard: bool,
          expert_mesh: DeviceMesh | None = None) -> None:
    """`last_reshard`: whether [norm, output] reshard after forward; TorchTitan keeps them
    gathered unless the policy is "always", since backward needs them first."""
    if model.tok_embeddings is not None:
        fully_shard(model.tok_embeddings, mesh=mesh, reshard_after_forward=reshard)
    for block in model.layers.values():
        if expert_mesh is not None and hasattr(block, "moe"):
            fully_shard(block.moe.experts, mesh=expert_mesh, reshard_after_forward=reshard)
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    if model.norm is not None:
        fully_shard([model.norm, model.output], mesh=mesh, reshard_after_forward=last_reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
