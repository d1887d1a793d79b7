"""CPU implementations of what TorchTitan 0.3 computes with CUDA-only kernels, and of a torch
kernel whose CPU version lacks a dtype mix TorchTitan uses.

- `torchtitan::silu_and_mul` / `torchtitan::silu_and_mul_backward` (the fused-SwiGLU and
  fused-grouped-experts overrides): torch.library custom ops registered for "cuda" only, with
  a triton kernel behind them. Here the same math in eager torch, for the CPU: `silu(gate) *
  up` over the rows below `offsets[-1]` (all rows without offsets), computed in float32 and
  stored in the input's dtype, rows past the limit zero (the kernel leaves them unwritten).
  The ops' own fake implementations stay: under `--compute fake` they give the shapes.
- torch's fused Adam / AdamW on CPU takes no optimizer states in another dtype than the
  parameter (`expected scalar type Float but found BFloat16`); CUDA's does, and TorchTitan's
  `--optimizer.implementation fused_opt_states_bf16` keeps bf16 states next to fp32 params.
  The step then runs on float32 copies of those states, written back in their own dtype.
  An optimizer step is local math: no collective depends on how it is computed.
- the Helion RoPE overrides (`torchtitan.overrides.helion_rope`): TorchTitan's modules fall back
  to its PyTorch RoPE for inputs that are not CUDA tensors, but the module refuses to load
  without the `helion` package, which needs triton (GPU kernels). Without helion the overrides
  build the same Helion modules, taking that CPU fallback: what TorchTitan itself runs with
  helion installed on a CPU. RoPE is local math: the kernel issues no collective.
"""

from __future__ import annotations

import functools
import importlib
import sys

import torch

SILU_AND_MUL_MODULE = "torchtitan.overrides.fused_swiglu"
"""Where TorchTitan 0.3 defines the fused SwiGLU ops (imported by `--override.imports`)."""


def _row_mask(x: torch.Tensor, offsets: torch.Tensor | None) -> torch.Tensor | None:
    """(rows, 1) bool: the rows the kernel computes (below offsets[-1]), None for all of them.
    Built from tensors only: no Python value is read from `offsets`."""
    if offsets is None:
        return None
    return (torch.arange(x.shape[0], device=x.device) < offsets[-1].to(x.device)).unsqueeze(1)


def silu_and_mul_cpu(gate: torch.Tensor, up: torch.Tensor, offsets: torch.Tensor | None = None) -> torch.Tensor:
    """`torchtitan::silu_and_mul` on a CPU: silu(gate) * up, in float32, stored as gate's dtype."""
    g, u = gate.float(), up.float()
    out = torch.nn.functional.silu(g) * u
    mask = _row_mask(gate, offsets)
    if mask is not None:
        out = out.masked_fill(~mask, 0.0)
    return out.to(gate.dtype).contiguous()


def silu_and_mul_backward_cpu(
    grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, offsets: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`torchtitan::silu_and_mul_backward` on a CPU: the kernel's formulas, in float32."""
    grad, g, u = grad_out.float(), gate.float(), up.float()
    sig = torch.sigmoid(g)
    grad_gate = grad * u * sig * (1.0 + g * (1.0 - sig))
    grad_up = grad * g * sig
    mask = _row_mask(gate, offsets)
    if mask is not None:
        grad_gate, grad_up = grad_gate.masked_fill(~mask, 0.0), grad_up.masked_fill(~mask, 0.0)
    return grad_gate.to(gate.dtype).contiguous(), grad_up.to(up.dtype).contiguous()


HELION_ROPE_MODULE = "torchtitan.overrides.helion_rope"
"""Where TorchTitan 0.3 defines the Helion RoPE overrides (imported by `--override.imports`)."""

_registered: set[str] = set()


def helion_rope_on_cpu(args: list[str]) -> None:
    """Without helion, the Helion RoPE overrides take TorchTitan's own CPU fallback (None: the
    PyTorch RoPE of the parent class) instead of refusing to build. TorchTitan imports the
    `--override.imports` modules while it builds the trainer: one named in `args` is imported
    here first."""
    if any(HELION_ROPE_MODULE in a for a in args):
        importlib.import_module(HELION_ROPE_MODULE)
    mod = sys.modules.get(HELION_ROPE_MODULE)
    if mod is None or getattr(mod, "_HELION_IMPORT_ERROR", None) is None:
        return
    mod._HELION_IMPORT_ERROR = None  # type: ignore[attr-defined]
    for name in ("_apply_helion_cossin_rope", "_apply_helion_complex_rope"):
        setattr(mod, name, lambda query, key, rope_cache, positions: None)


def install_custom_ops() -> None:
    """Register the CPU kernels of the TorchTitan custom ops already defined (their modules are
    imported by TorchTitan's config parse, `--override.imports`); once per op and process."""
    if SILU_AND_MUL_MODULE not in sys.modules:
        return
    for name, fn in (
        ("torchtitan::silu_and_mul", silu_and_mul_cpu),
        ("torchtitan::silu_and_mul_backward", silu_and_mul_backward_cpu),
    ):
        if name not in _registered:
            torch.library.register_kernel(name, "cpu", fn)
            _registered.add(name)


def _mixed_state_dtypes(fused_step):
    """torch._fused_adam(w)_ taking optimizer states in another dtype than their parameters."""

    @functools.wraps(fused_step)
    def step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *args, **kwargs):
        states = [exp_avgs, exp_avg_sqs, max_exp_avg_sqs]
        mixed = any(s.dtype != p.dtype for lst in states for s, p in zip(lst, params))
        if not mixed or not params or params[0].device.type != "cpu":
            return fused_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *args, **kwargs)
        ups = [[s.to(p.dtype) for s, p in zip(lst, params)] for lst in states]
        out = fused_step(params, grads, *ups, state_steps, *args, **kwargs)
        for lst, up in zip(states, ups):
            for s, u in zip(lst, up):
                s.copy_(u)
        return out

    step.__commtrace_mixed__ = True  # type: ignore[attr-defined]
    return step


def install_fused_adam() -> None:
    """Route torch's fused Adam / AdamW steps through `_mixed_state_dtypes` (once per process)."""
    for name in ("_fused_adam_", "_fused_adamw_"):
        fn = getattr(torch, name, None)
        if fn is not None and not getattr(fn, "__commtrace_mixed__", False):
            setattr(torch, name, _mixed_state_dtypes(fn))
