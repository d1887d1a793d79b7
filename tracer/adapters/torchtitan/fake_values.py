"""Under `--compute fake`: the values TorchTitan reads without them deciding communication.

Fake compute (tracer/fake/compute.py) has no tensor values, so a rank that reads one
is recorded again with real compute. TorchTitan 0.3 reads values where they cannot change what
is communicated:
- scalars on every step, to observe them: `int(local_valid_tokens)` for its structured log,
  `.item()` of the loss and grad norm it logs (after the all-reduces that produce them, which
  are still issued and recorded) and, once, of the RNG seed rank 0 broadcasts: a fake tensor's
  `.item()`, `int()` and `float()` answer 0 (bool() still raises: it is how code branches);
- weight init: torch 2.13's `trunc_normal_` redraws until no sample is out of bounds
  (`if not mask.any()`): a fake tensor has no samples, so it is returned as it is.
Only commtrace's own fake compute answers so: dynamo traces a compiled region with fake tensors
of its own, and reads their values the same way (`.tolist()` of MoE token counts, item by item):
those keep torch's answer (a graph break, or a symbolic size). Answering 0 there gave gpt_oss's
compiled MoE all-to-all splits of 0 tokens (`--compile.enable` with EP: a fake-tensor error).
Reads that can decide communication go through other calls (`.tolist()` of MoE token counts
for the all-to-all splits, data-dependent shapes): they still raise, and that rank is recorded
again with real compute, as for any program.
"""

from __future__ import annotations

import torch
import torch.nn.init as nn_init
from torch._subclasses.fake_tensor import FakeTensor, is_fake

from tracer.fake.compute import FakeCompute

_real_item = torch.Tensor.item
_real_int = torch.Tensor.__int__
_real_float = torch.Tensor.__float__
_real_trunc_normal = nn_init._no_grad_trunc_normal_


def _ours(t) -> bool:
    """A fake tensor of commtrace's fake compute (not of dynamo's tracing)."""
    return isinstance(t, FakeTensor) and isinstance(t.fake_mode, FakeCompute)


def _item(self):
    if _ours(self):
        return False if self.dtype == torch.bool else (0.0 if self.dtype.is_floating_point else 0)
    return _real_item(self)


def _int(self):
    return 0 if _ours(self) else _real_int(self)


def _float(self):
    return 0.0 if _ours(self) else _real_float(self)


def _trunc_normal(tensor, *args, **kwargs):
    if is_fake(tensor):
        return tensor
    return _real_trunc_normal(tensor, *args, **kwargs)


def install() -> None:
    torch.Tensor.item = _item
    torch.Tensor.__int__ = _int
    torch.Tensor.__float__ = _float
    nn_init._no_grad_trunc_normal_ = _trunc_normal  # trunc_normal_ calls it by its module name
