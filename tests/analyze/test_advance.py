"""The columnar replay (analyzer.waitfor.advance) leaves exactly the ranks that the Python replay
(waitfor.replay.simulate) leaves blocked -- in the same ops, waiting for the same ranks, matched
or not -- on pipeline traces (where the ordering certificate fails) healthy and with seeded bugs,
and on the p2p / deadlock programs; `check` and `hang` use it on any size (no cap)."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from analyzer.checks import ordering, p2p
from analyzer.checks.options import CheckOptions
from analyzer.loader import load
from analyzer.waitfor.advance import advance
from analyzer.waitfor.certificate import ordered
from analyzer.waitfor.replay import simulate

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))

from synth_pp import generate  # noqa: E402

BIG = 1 << 20  # --eager-bytes larger than any message: every blocking send is eager


def _blocked(found):
    return {r: (b.key, sorted(b.waits_for), b.matched, b.event["op"], b.event["idx"]) for r, b in found.items()}


def _same(t):
    for eager in (0, BIG):
        assert _blocked(advance(t, eager)) == _blocked(simulate(t, eager))
    return advance(t)


@pytest.mark.parametrize("golden", ["fsdp_tp_pp_1f1b", "fsdp_tp_pp_interleaved"])
def test_pipeline_goldens_fail_the_certificate_and_nobody_blocks(golden):
    t = load(os.path.join(REPO, "traces", golden + ".trace"))
    assert not ordered(t)  # 1F1B orders sends and recvs differently per stage
    assert _same(t) == {}


@pytest.mark.parametrize(
    "name, world",
    [
        ("p2p", 4),
        ("deadlock_ab", 2),
        ("deadlock_send_send", 2),
        ("bug_recv_never_sent", 4),
        ("deadlock_mesh", 8),
        ("bug_subgroup_skip", 8),
    ],
)
def test_programs(recorded, name, world):
    _same(load(recorded(name, world, "fake")[0]))


# tests/programs/pipeline.py, 2 stages x 2 replicas: rank = stage * 2 + replica
@pytest.mark.parametrize(
    "args, blocked",
    [
        ((), {}),
        (("--batched",), {}),
        (("--batched", "--bug", "swap"), {}),  # a batch posts both ops before it waits: no deadlock
        # rank 1 waits for rank 3's gradient before sending; rank 3 waits for the activation first
        (
            ("--bug", "swap"),
            {
                1: ("recv", [3], True),
                3: ("recv", [1], True),
                0: ("all_reduce", [1], True),
                2: ("all_reduce", [3], True),
            },
        ),
        # rank 3 never sends its last gradient: rank 1 waits in that recv, rank 0 in the dp all-reduce
        (("--bug", "skip"), {1: ("recv", [3], False), 0: ("all_reduce", [1], True)}),
        # one more dp all-reduce on rank 1: nobody else issues it
        (("--bug", "extra"), {1: ("all_reduce", [0], False)}),
    ],
)
def test_pipeline_program(recorded, args, blocked):
    t = load(recorded("pipeline", 4, "fake", args)[0])
    found = _same(t)
    assert {r: (b.event["op"], b.waits_for, b.matched) for r, b in found.items()} == blocked


# bench/synth_pp.py at 4 stages x 3 replicas x tp 2 (24 ranks): rank = (stage * 3 + d) * 2 + t
SWAP, SKIP, EXTRA = (8, 19, 2)  # stage 1 (d 1, t 0); stage 3 (d 0, t 1) whose upstream is 13; stage 0


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved"])
@pytest.mark.parametrize(
    "fault",
    [{}, {"swap": SWAP}, {"skip_send": SKIP}, {"extra": EXTRA}, {"swap": SWAP, "skip_send": SKIP, "extra": EXTRA}],
)
def test_synthetic_pipelines(tmp_path, schedule, fault):
    path = str(tmp_path / "pp.trace")
    generate(path, pp=4, dp=3, tp=2, events=600, schedule=schedule, microbatches=8, verbose=False, **fault)
    found = _same(load(path))
    assert bool(found) == bool(set(fault) - ({"swap"} if schedule == "interleaved" else set()))


def test_check_finds_each_seeded_pipeline_fault_and_nothing_else(tmp_path):
    """Swap: the cycle 8 <-> 14 on the pp edge stage 1 -> 2; the skipped send: rank 13's recv
    from 19 is unmatched; the extra all-reduce: a missing_collective on rank 2."""
    path = str(tmp_path / "pp.trace")
    generate(path, pp=4, dp=3, tp=2, events=600, microbatches=8, verbose=False, swap=SWAP, skip_send=SKIP, extra=EXTRA)
    t = load(path)
    assert not ordered(t)
    cycles = ordering.check(t, CheckOptions()).findings
    assert [(f.kind.name, f.ranks, f.p2p_edges) for f in cycles] == [("deadlock_cycle", [8, 14], [[8, 14]])]
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "analyzer"), "check", path, "--json"],
        capture_output=True,
        text=True,
    )
    found = sorted((f["kind"], f["culprit_ranks"], f["ranks"]) for f in json.loads(out.stdout)["findings"])
    assert found == [
        ("deadlock_cycle", [8, 14], [8, 14]),
        ("missing_collective", [2], [0, 2, 4]),
        ("unmatched_p2p", [13], [13, 19]),
    ]


def _pipeline(tmp_path, schedule, **fault):
    path = str(tmp_path / "pp.trace")
    generate(path, pp=4, dp=3, tp=2, events=600, schedule=schedule, microbatches=8, verbose=False, **fault)
    return load(path)


ALL_FAULTS = {"swap": SWAP, "skip_send": SKIP, "extra": EXTRA}


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved"])
def test_channels_keyed_per_event_where_codes_are_not_per_rank(tmp_path, schedule):
    """advance keys channels per pattern code when every code belongs to one rank; a trace whose
    pattern table does not say so (rank -1 on every pattern) takes the per-event keys: same answer."""
    t = _pipeline(tmp_path, schedule, **ALL_FAULTS)
    odd = dataclasses.replace(t, patterns=t.patterns.with_columns(rank=pl.lit(-1, pl.Int32)))
    for eager in (0, BIG):
        assert _blocked(advance(odd, eager)) == _blocked(simulate(t, eager))


def _p2p_inputs(t):
    pats = (
        t.patterns.with_columns(op=pl.col("op").cast(pl.String))
        .filter(pl.col("op").is_in(["send", "recv"]))
        .with_columns(is_send=pl.col("op") == "send")
    )
    ev = t.with_codes(t.stream.select("rank", "idx", "code", "seq"), pats)
    table = t.patterns.select(pl.col("dtype").to_physical().cast(pl.Int64), "in_shapes", "out_shapes")
    arrays = [np.r_[table[c].fill_null(-3).to_numpy(), -2] for c in ("dtype", "in_shapes", "out_shapes")]
    return pats, ev, arrays


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved"])
@pytest.mark.parametrize("fault", [{}, {"skip_send": SKIP}, ALL_FAULTS])
def test_p2p_pairs_by_instance_slot_equal_the_full_join(tmp_path, schedule, fault):
    """The p2p check matches sends and recvs by array slot per instance; the full join on (group,
    src, dst, seq) it replaced leaves the same unmatched pairs (rank 13's recv from 19 when 19 skips
    its last send), in (group, src, dst, seq) order."""
    t = _pipeline(tmp_path, schedule, **fault)
    pats, ev, arrays = _p2p_inputs(t)
    fast = p2p._by_instance(t, pats, ev, *arrays)
    slow = p2p._by_join(t, pats, ev, *arrays)
    cols = ["group", "src", "dst", "seq", "idx", "code", "idx_r", "code_r"]
    rows = [r for r in fast.select(cols).rows()]
    assert rows == sorted(slow.select(cols).rows(), key=lambda r: r[:4])
    assert [(r[1], r[2], r[4] is None) for r in rows] == ([(19, 13, True)] if fault else [])


def test_p2p_key_used_twice_on_one_side_falls_back_to_the_join(tmp_path):
    """A (group, src, dst, seq) sent twice has no single slot: the check takes the join."""
    t = _pipeline(tmp_path, "1f1b")
    pats, ev, arrays = _p2p_inputs(t)
    twice = pl.concat([ev, ev.filter(pl.col("code").is_in(pats.filter(pl.col("is_send"))["code"].implode())).head(1)])
    assert p2p._by_instance(t, pats, twice, *arrays) is None
    assert p2p._by_join(t, pats, twice, *arrays).height == 0
