"""The columnar fixed point (analyzer.waitfor.settle) leaves exactly the ranks that the Python replay
(waitfor.simulate) leaves blocked, in the same ops, waiting for the same ranks -- on every
trace whose ordering certificate holds; and the certificate holds on the SPMD ones."""

import os

import pytest

from analyzer.loader import load
from analyzer.waitfor.certificate import ordered
from analyzer.waitfor.replay import simulate
from analyzer.waitfor.settle import settle

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _blocked(found):
    return {r: (b.key, sorted(b.waits_for), b.matched, b.event["op"], b.event["idx"]) for r, b in found.items()}


@pytest.mark.parametrize(
    "name, world",
    [
        ("bug_subgroup_skip", 8),  # a skipped collective: its group waits at the end
        ("bug_recv_never_sent", 4),  # a recv nobody sends: its rank waits, and whoever needs it
        ("stop_early", 4),
        ("collectives", 4),
        ("fsdp", 4),
    ],
)
def test_settle_matches_the_replay(recorded, name, world):
    t = load(recorded(name, world, "fake")[0])
    assert ordered(t)
    assert _blocked(settle(t)) == _blocked(simulate(t))


@pytest.mark.parametrize("golden", ["fsdp", "fsdp_tp", "hsdp_tp", "fsdp_ep"])
def test_healthy_goldens_settle_with_nobody_blocked(golden):
    t = load(os.path.join(REPO, "traces", golden + ".trace"))
    assert ordered(t) and settle(t) == {} == simulate(t)


def test_some_blocked_ranks_really_are_blocked(recorded):
    """Not vacuous: rank 5 skipped a tp all-reduce, so the other members of its tp group (4, 6,
    7) wait in their last one, which 5 never issues; their dp peers (0, 2, 3) wait on them."""
    t = load(recorded("bug_subgroup_skip", 8, "fake")[0])
    found = settle(t)
    assert {r: b.waits_for for r, b in found.items() if not b.matched} == {4: [5], 6: [5], 7: [5]}
    assert {r: b.waits_for for r, b in found.items() if b.matched} == {0: [4], 2: [6], 3: [7]}
