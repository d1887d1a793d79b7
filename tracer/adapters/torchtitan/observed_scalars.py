"""`.item()` of a fake tensor under `--compute fake`: a placeholder instead of a re-recording.

Fake compute (tracer/capture/fake_compute.py) has no tensor values, so a rank that reads one
is recorded again with real compute. TorchTitan 0.3 reads scalars on every step only to observe
them: the loss and grad norm it logs (after the all-reduces that produce them, which are still
issued and recorded) and, once, the RNG seed rank 0 broadcasts. None of these decides what is
communicated, so the adapter answers a fake tensor's `.item()` with 0 of its dtype. Reads that
can decide communication go through other calls (`.tolist()` of MoE token counts for the
all-to-all splits, data-dependent shapes): they still raise, and that rank is re-recorded with
real compute as for any program.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor

_real_item = torch.Tensor.item


def _item(self):
    if isinstance(self, FakeTensor):
        return False if self.dtype == torch.bool else (0.0 if self.dtype.is_floating_point else 0)
    return _real_item(self)


def install() -> None:
    torch.Tensor.item = _item
