"""In local mode, TorchTitan's weights as one device initialises them, whatever the layout.

TorchTitan initialises a parallelised model in place (`init_weights` on the sharded DTensor
parameters). How a random init of a shard relates to the full tensor's depends on DTensor's RNG
tracker, which supports only CUDA-like devices ("DTensor random operators may not have complete
support on cpu device mesh"): on a CPU every shard draws from the same seed, so FSDP over 2 ranks
starts from other weights than 1 rank does, and no layout can be compared with its 1-rank twin
(measured: `analyzer numerics` found the first module, tok_embeddings, 7% off at step 0 forward).
TorchTitan's own answer for parity across layouts is a seed checkpoint (the weights of a 1-device
init, loaded by every layout). This is that checkpoint without the files and DCP: after the
Trainer is built, a fresh copy of the model is built and initialised on one device
(`torch.manual_seed(debug.seed or 0)`, TorchTitan's `init_weights`, outside LocalTensorMode), and
every rank's parameters take their part of it (`distribute_tensor(..., src_data_rank=None)`: each
rank cuts its own shard, no collective). The 1-rank twin goes through the same, so both start from
the same weights by construction. Local mode only: a fake-mode rank has no values to set.
"""

from __future__ import annotations

import torch

WRAPPERS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")
"""Name parts activation checkpointing, torch.compile and FSDP1 put into a parameter's FQN."""


def fqn(name: str) -> str:
    for w in WRAPPERS:
        name = name.replace(w, "")
    return name


def apply(trainer, config) -> None:
    """Overwrite every model part's parameters with a 1-device init of the same model config."""
    from torch.distributed._local_tensor import local_tensor_mode, maybe_disable_local_tensor_mode
    from torch.distributed.tensor import DTensor, distribute_tensor
    from torchtitan.config import TORCH_DTYPE_MAP
    from torchtitan.tools import utils

    if local_tensor_mode() is None:
        return
    with maybe_disable_local_tensor_mode(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.debug.seed or 0)
        with torch.device("meta"), utils.set_default_dtype(TORCH_DTYPE_MAP[config.training.dtype]):
            fresh = trainer.model_config.build()
        fresh.to_empty(device="cpu")
        with torch.no_grad():
            fresh.init_weights(buffer_device=None)
        full = {fqn(n): p.detach() for n, p in fresh.named_parameters()}
    with torch.no_grad():
        for part in trainer.model_parts:
            for name, p in part.named_parameters():
                value = full.get(fqn(name))
                if value is None or tuple(value.shape) != tuple(p.shape):
                    raise RuntimeError(
                        f"one-device init: parameter {name} {tuple(p.shape)} has no counterpart in a fresh "
                        f"{type(fresh).__name__}"
                    )
                if isinstance(p, DTensor):
                    shard = distribute_tensor(value.to(p.dtype), p.device_mesh, p.placements, src_data_rank=None)
                    p.to_local().copy_(shard.to_local())
                else:
                    p.copy_(value.to(p.dtype))
