"""TorchTitan's model flavors for the built-in llama3 workload: `[model] flavor = "70B"` gives the
architecture TorchTitan builds for it. Copied from TorchTitan v0.2.2's
torchtitan/models/llama3/__init__.py (`llama3_args`) over its TransformerModelArgs defaults
(vocab_size 128256, multiple_of 256, no ffn_dim_multiplier, rope_theta 10000, norm_eps 1e-5).
Attention kernels (flex, varlen) compute locally: those flavors share their base's dimensions."""

from __future__ import annotations

from typing import Any

TORCHTITAN_DEFAULTS = dict(
    vocab_size=128256, multiple_of=256, ffn_dim_multiplier=None, rope_theta=10000.0, norm_eps=1e-5
)

_DEBUG = dict(dim=256, n_layers=6, n_heads=16, n_kv_heads=None, vocab_size=2048, rope_theta=500000.0)
_8B = dict(
    dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.3, multiple_of=1024, rope_theta=500000.0
)

LLAMA3: dict[str, dict[str, Any]] = {
    name: {**TORCHTITAN_DEFAULTS, **args}  # type: ignore[dict-item]
    for name, args in {
        "debugmodel": _DEBUG,
        "debugmodel_flex_attn": _DEBUG,
        "debugmodel_varlen_attn": _DEBUG,
        "8B": _8B,
        "8B_flex": _8B,
        "8B_varlen": _8B,
        "70B": dict(
            dim=8192,
            n_layers=80,
            n_heads=64,
            n_kv_heads=8,
            ffn_dim_multiplier=1.3,
            multiple_of=4096,
            rope_theta=500000.0,
        ),
        "405B": dict(
            dim=16384,
            n_layers=126,
            n_heads=128,
            n_kv_heads=8,
            ffn_dim_multiplier=1.2,
            multiple_of=4096,
            rope_theta=500000.0,
        ),
    }.items()
}
"""flavor -> the Model fields it sets."""

FLAVORS = {"llama3": LLAMA3}
"""model.name -> its flavors (the built-in workload's families)."""
