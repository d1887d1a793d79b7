"""The TorchTitan adapter's synthetic tokens for a numerics twin, without recording: the twin of D
dp ranks yields, batch after batch, the D ranks' batches concatenated in dp-rank order (the same
global batch); bad [tracer] twin_of_dp values are one line."""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = [
    pytest.mark.torchtitan,
    pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None, reason="TorchTitan is not installed"),
]


def _batches(n: int, **kw) -> list[tuple[torch.Tensor, torch.Tensor]]:
    from tracer.adapters.torchtitan.synthetic_data import SyntheticTokens

    cfg = SyntheticTokens.Config(vocab_size=kw.pop("vocab", 97), seed=3, twin_of_dp=kw.pop("twin", 0))
    it = iter(SyntheticTokens(cfg, seq_len=8, **kw))
    return [(b["input"], labels) for b, labels in (next(it) for _ in range(n))]


def test_twin_takes_every_dp_ranks_batch_at_once():
    ranks = [_batches(2, dp_rank=d, local_batch_size=2) for d in range(3)]
    twin = _batches(2, twin=3, local_batch_size=6)
    for step in range(2):
        for i in (0, 1):
            assert torch.equal(twin[step][i], torch.cat([r[step][i] for r in ranks]))
    assert not torch.equal(ranks[0][0][0], ranks[1][0][0])  # dp ranks see different tokens
    assert not torch.equal(ranks[0][0][0], ranks[0][1][0])  # and each step new ones
    assert int(ranks[2][0][0].max()) < 97


def test_twin_batch_must_hold_every_dp_rank():
    with pytest.raises(ValueError, match="multiple of 4"):
        _batches(1, twin=4, local_batch_size=6)


@pytest.mark.parametrize(
    ("tracer", "error"),
    [
        ("world_size = 1\ntwin_of_dp = -2", "twin_of_dp must be an integer, at least 0"),
        ("world_size = 2\ntwin_of_dp = 2", "a numerics twin runs on one rank, got world size 2"),
    ],
)
def test_bad_twin_of_dp_is_one_line(tmp_path, tracer, error):
    from tracer.adapters.torchtitan.errors import TorchTitanError
    from tracer.adapters.torchtitan.request import from_toml
    from tracer.record.options import RecordOptions

    toml = tmp_path / "twin.toml"
    toml.write_text(f'[job]\ntorchtitan = {{module = "llama3", config = "llama3_debugmodel"}}\n[tracer]\n{tracer}\n')
    with pytest.raises(TorchTitanError, match=error):
        from_toml(RecordOptions(config=str(toml)), note=lambda _: None)
