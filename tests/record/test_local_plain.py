"""Plain tensors under LocalTensorMode (tracer/local/plain.py).

Unpatched torch 2.13: `n = torch.tensor(0); n += per_rank` under LocalTensorMode(4) leaves the
sum of the 4 ranks' values in the one shared `n` (each rank's in-place add runs on it in turn).
TorchTitan's token count is made that way: under FSDP 2 x TP 2 every rank divided its loss by
64 tokens instead of 32, and its loss was half its one-device twin's (docs/numerics.md)."""

from __future__ import annotations

import pytest
import torch
from torch.distributed._local_tensor import LocalTensor, LocalTensorMode

from tracer.capture.patches import Patcher
from tracer.capture.recorder import RecordError
from tracer.local import plain as local_plain


@pytest.fixture
def patched():
    p = Patcher()
    local_plain.install(p)
    try:
        yield
    finally:
        p.undo()


def _values(t) -> list:
    return [t._local_tensors[r].item() for r in sorted(t._local_tensors)]


def test_a_tensor_made_from_data_is_one_per_rank(patched):
    with LocalTensorMode(4) as lm:
        n = torch.tensor(0, dtype=torch.int64)
        assert isinstance(n, LocalTensor)
        n += lm.rank_map(lambda r: torch.tensor(10 + r))
        assert _values(n) == [10, 11, 12, 13]
        n += (torch.ones(16) != -100).sum()
        assert _values(n) == [26, 27, 28, 29]
        assert _values(torch.as_tensor([5.0]).sum()) == [5.0] * 4


def test_a_plain_tensor_takes_a_value_every_rank_agrees_on_once(patched):
    n = torch.zeros(())  # made before the mode: one object for all ranks
    with LocalTensorMode(4) as lm:
        n += lm.rank_map(lambda r: torch.tensor(16.0))
    assert type(n) is torch.Tensor and n.item() == 16.0  # not 64: the sum over the ranks


def test_a_plain_tensor_cannot_hold_a_different_value_per_rank(patched):
    n = torch.zeros(())
    with LocalTensorMode(4) as lm:
        with pytest.raises(RecordError, match=r"different value on each rank into a plain tensor \(\)"):
            n += lm.rank_map(lambda r: torch.tensor(float(r)))
    assert n.item() == 0.0  # left as it was


def test_outside_the_mode_nothing_changes(patched):
    t = torch.tensor([1.0, 2.0])
    assert type(t) is torch.Tensor
    t += torch.ones(2)
    assert t.tolist() == [2.0, 3.0]
