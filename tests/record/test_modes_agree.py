"""Fake mode (a process per rank) and local mode (LocalTensorMode) record the same comm pattern
for the same SPMD program: every column of every event of every rank, except timestamps."""

import pytest
from conftest import stream

from analyzer.loader import load

SPMD = [
    ("fsdp", 4),
    ("tp", 4),
    ("dtensor", 4),
    ("groups", 8),
    ("a2a_splits", 4),
    ("tp_mlp", 4),
    ("tp_sequence", 4),
    ("coalesced", 4),
]
SKIP = {"ts", "rank", "label", "ranks"}


@pytest.mark.parametrize("name,world", SPMD)
def test_fake_and_local_agree(recorded, name, world):
    fake, local = (load(recorded(name, world, "fake")[0]), load(recorded(name, world, "local")[0]))
    assert fake.ranks == local.ranks == list(range(world))
    for rank in range(world):
        a, b = stream(fake, rank), stream(local, rank)
        assert len(a) == len(b)
        for x, y in zip(a, b):
            x = {k: v for k, v in x.items() if k not in SKIP}
            y = {k: v for k, v in y.items() if k not in SKIP}
            assert x == y
