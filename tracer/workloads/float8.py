"""Float8 training as TorchTitan v0.2.2's Float8LinearConverter applies it
(torchtitan/components/quantization/float8.py), with torchao's own code: `model.converters =
["float8"]` and `[quantize.linear.float8]`, tensorwise scaling (the default recipe) or one of
torchao's rowwise recipes (`recipe_name = "rowwise"` / `"rowwise_with_gw_hp"`, see the end).

- convert(): before any parallelism, torchao's convert_to_float8_training swaps every nn.Linear
  whose weight dims are both divisible by 16 and whose FQN contains none of `filter_fqns`
  (TorchTitan's module_filter_fn) for a Float8Linear. The 405B preset filters "output": the
  lm head stays bf16.
- enable_fsdp_float8_all_gather (only with dp_shard > 1, as TorchTitan): the Float8Linear
  weights are WeightWithDynamicFloat8CastTensor, whose fsdp_pre_all_gather casts the local shard
  to float8: FSDP2 all-gathers 1 byte per element of those weights, 2 (bf16) of the others (the
  norms), in one uint8 buffer per unit. Without precompute each cast first all-reduces (max) the
  weight's amax over the FSDP mesh (tensor_to_amax(reduce_amax=True)): one per weight, per
  all-gather.
- precompute_float8_dynamic_scale_for_fsdp: after each optimizer step, one all-reduce (max) of
  the stacked amaxes of a model part's float8 weights, on the weights' whole mesh (fsdp x tp:
  torch.clamp of a Partial(max) DTensor reduces it); the all-gathers then use those scales.
- tensor parallel, when converters names "float8" (parallelize_llama's test; v0.2.2's registry
  name "quantize.linear.float8" converts but keeps the plain TP styles): TorchTitan's
  Float8ColwiseParallel / Float8RowwiseParallel / PrepareFloat8ModuleInput (tensor_parallel.py)
  cast each TP region's input to float8 before its
  sequence-parallel all-gather (1 byte per element; the cast's amax is all-reduced (max) over tp,
  the input being a Shard(1) DTensor), and mark the outputs so that backward casts the incoming
  gradients to float8 (their amax all-reduced over tp too). Reduce-scatters stay bf16.

Rowwise recipes (recipe_name set: Float8LinearConfig.from_recipe_name, as TorchTitan v0.2.2 and
0.3 build it): no float8 all-gather (torchao and TorchTitan refuse enable_fsdp_float8_all_gather
with a recipe; FSDP all-gathers the bf16 weights), no precomputed scales, and plain TP styles
(parallelize_llama's enable_float8_tensorwise_tp is false for a rowwise recipe): sequence-parallel
all-gathers in bf16. The scales are per row (axiswise), computed where the tensor is; a cast whose
row runs along a tp-sharded dim (wo / w2's Shard(-1) input, their Shard(1) weights, a colwise
Linear's output gradient) takes a Partial(max) amax that DTensor all-reduces over tp.

The float8 gemm itself is emulated (torchao's `emulate`, the same for every rank): it is local
math, no collective depends on it, and CPUs have no float8 tensor cores.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import torch.nn as nn

from tracer.config.quantize import ROWWISE_RECIPES


def rowwise(cfg) -> bool:
    """A rowwise recipe: FSDP and TP communicate in high precision (parallelize_llama: float8_is_rowwise)."""
    return cfg.quantize.linear.float8.recipe_name in ROWWISE_RECIPES


def tensorwise_tp(cfg) -> bool:
    """parallelize_llama's enable_float8_tensorwise_tp: `"float8" in converters and not float8_is_rowwise`."""
    return "float8" in cfg.model.converters and not rowwise(cfg)


def fsdp_float8_all_gather(cfg) -> bool:
    """TorchTitan: enable_fsdp_float8_all_gather = dp_shard_enabled and the key (never with a
    recipe_name: TorchTitan asserts, tracer/config/check.py refuses it)."""
    f8 = cfg.quantize.linear.float8
    return cfg.parallelism.data_parallel_shard_degree > 1 and f8.enable_fsdp_float8_all_gather and not f8.recipe_name


def precompute(cfg) -> bool:
    """TorchTitan: precompute_scale = the float8 all-gather and the key."""
    return fsdp_float8_all_gather(cfg) and cfg.quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp


def module_filter_fn(mod: nn.Module, fqn: str, filter_fqns: list[str]) -> bool:
    """TorchTitan v0.2.2's torchtitan/components/quantization/utils.py:module_filter_fn."""
    if not isinstance(mod, nn.Linear):
        return False
    dims_multiples_of_16 = mod.weight.shape[0] % 16 == 0 and mod.weight.shape[1] % 16 == 0
    return dims_multiples_of_16 and not any(f in fqn for f in filter_fqns)


def convert(model: nn.Module, cfg) -> None:
    """Swap the model's Linear layers for torchao Float8Linear in place (a whole Transformer or a
    pipeline stage of it: FQNs are the whole model's, so filters match the same modules)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    f8 = cfg.quantize.linear.float8
    if f8.recipe_name is not None:  # TorchTitan v0.2.2: from_recipe_name; emulated here (local math only)
        config = dataclasses.replace(Float8LinearConfig.from_recipe_name(f8.recipe_name), emulate=True)
    else:
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp_float8_all_gather(cfg), emulate=True)
    convert_to_float8_training(
        model, config=config, module_filter_fn=partial(module_filter_fn, filter_fqns=list(f8.filter_fqns))
    )


def tp_styles():
    """(rowwise, colwise, prepare_module_input) of torchao's float8 tensor parallel."""
    from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,
                                                       PrepareFloat8ModuleInput)

    return Float8RowwiseParallel, Float8ColwiseParallel, PrepareFloat8ModuleInput


def post_optimizer_hook(chunks: list[nn.Module]) -> None:
    """TorchTitan's Float8LinearConverter.post_optimizer_hook: per model part, one amax all-reduce."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    for chunk in chunks:
        precompute_float8_dynamic_scale_for_fsdp(chunk)
