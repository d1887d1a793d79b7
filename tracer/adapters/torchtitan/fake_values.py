"""Under `--compute fake`: the values TorchTitan reads without them deciding communication.

Fake compute (tracer/capture/fake_compute.py) has no tensor values, so a rank that reads one
is recorded again with real compute. TorchTitan 0.3 reads values where they cannot change what
is communicated:
- scalars on every step, to observe them: `int(local_valid_tokens)` for its structured log,
  `.item()` of the loss and grad norm it logs (after the all-reduces that produce them, which
  are still issued and recorded) and, once, of the RNG seed rank 0 broadcasts: a fake tensor's
  `.item()`, `int()` and `float()` answer 0 (bool() still raises: it is how code branches);
- weight init: torch 2.13's `trunc_normal_` redraws until no sample is out of bounds
  (`if not mask.any()`): a fake tensor has no samples, so it is returned as it is.
Reads that can decide communication go through other calls (`.tolist()` of MoE token counts
for the all-to-all splits, data-dependent shapes): they still raise, and that rank is recorded
again with real compute, as for any program.
"""

from __future__ import annotations

import torch
import torch.nn.init as nn_init
from torch._subclasses.fake_tensor import FakeTensor, is_fake

_real_item = torch.Tensor.item
_real_int = torch.Tensor.__int__
_real_float = torch.Tensor.__float__
_real_trunc_normal = nn_init._no_grad_trunc_normal_


def _item(self):
    if isinstance(self, FakeTensor):
        return False if self.dtype == torch.bool else (0.0 if self.dtype.is_floating_point else 0)
    return _real_item(self)


def _int(self):
    return 0 if isinstance(self, FakeTensor) else _real_int(self)


def _float(self):
    return 0.0 if isinstance(self, FakeTensor) else _real_float(self)


def _trunc_normal(tensor, *args, **kwargs):
    if is_fake(tensor):
        return tensor
    return _real_trunc_normal(tensor, *args, **kwargs)


def install() -> None:
    torch.Tensor.item = _item
    torch.Tensor.__int__ = _int
    torch.Tensor.__float__ = _float
    nn_init._no_grad_trunc_normal_ = _trunc_normal  # trunc_normal_ calls it by its module name
