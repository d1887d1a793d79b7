"""The [compile] and [quantize] sections of a job config (TorchTitan v0.2.2's names): what the
built-in workload reads of them. torch.compile changes no collective itself but async tensor
parallel needs it; [quantize.linear.float8] configures model.converters = ["float8"]
(tracer/workloads/float8.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROWWISE_RECIPES = ("rowwise", "rowwise_with_gw_hp")
"""torchao's Float8LinearRecipeName values with axiswise (per row) scaling."""
FLOAT8_RECIPES = ("tensorwise", *ROWWISE_RECIPES)
"""[quantize.linear.float8] recipe_name: torchao's recipes."""


@dataclass(kw_only=True, slots=True)
class Compile:
    enable: bool = False
    """torch.compile (TorchTitan's per-block compile): changes no collective by itself; async TP needs it."""
    components: list[str] = field(default_factory=lambda: ["model", "loss"])
    """What is compiled: async TP needs "model"."""


@dataclass(kw_only=True, slots=True)
class Float8Linear:
    """[quantize.linear.float8]: torchao's float8 training (used with model.converters = ["float8"])."""

    enable_fsdp_float8_all_gather: bool = False
    """FSDP all-gathers the float8 weights (1 byte per element) instead of bf16; only with dp_shard > 1
    and no recipe_name."""
    precompute_float8_dynamic_scale_for_fsdp: bool = False
    """After each optimizer step, one all-reduce (max) of every float8 weight's amax computes their
    scales for the next all-gathers (only with the float8 all-gather)."""
    recipe_name: str | None = None
    """None (tensorwise, the float8 all-gather allowed), or torchao's Float8LinearConfig.from_recipe_name:
    "tensorwise", "rowwise" or "rowwise_with_gw_hp" (per-row scales: FSDP and TP stay bf16); with a
    recipe, enable_fsdp_float8_all_gather is refused (TorchTitan asserts)."""
    filter_fqns: list[str] = field(default_factory=list)
    """Linear modules whose FQN contains one of these stay in high precision."""
    emulate: bool = False
    """Emulated float8 gemm (the local math only; the workload always emulates on CPU)."""


@dataclass(kw_only=True, slots=True)
class QuantizedLinear:
    float8: Float8Linear = field(default_factory=Float8Linear)
    """[quantize.linear.float8]."""


@dataclass(kw_only=True, slots=True)
class Quantize:
    linear: QuantizedLinear = field(default_factory=QuantizedLinear)
    """[quantize.linear]: float8 is read; mx is refused through model.converters."""
