"""Flight Recorder leftovers (issue 27, item 5), on NCCL- and gloo-shaped dumps built as
corpus.py builds them: one verdict in check and hang.

- uneven all_gather_v / reduce_scatter_v (each member its own size) are healthy, per-member or
  flat; a contribution that does not add up, outputs that disagree or a dtype still are found;
- a size-mismatched send / recv pair of a pipeline is one p2p_mismatch (no deadlock_cycle: both
  sides are stuck in the same transfer), culprit the side whose shape no other transfer moves;
- gloo: a rank that skipped a collective leaves the others holding the next one, never
  completed: hang names the same missing_collective as check, not "no hang"."""

import os
import pickle
import sys

import pytest
from conftest import HERE

from analyzer.checks import run_checks
from analyzer.hang import analyze
from analyzer.loader import load

sys.path.insert(0, os.path.join(HERE, "flight_recorder"))
from corpus import config, dumps, entry  # noqa: E402

SIZES = [3, 1, 4, 2]  # rank r's own contribution


def _verdicts(tmp_path, per: dict, cfg, status=None):
    for r, d in dumps(per, cfg, status).items():
        with open(tmp_path / f"rank_{r}", "wb") as f:
            pickle.dump(d, f, protocol=2)
    t = load(tmp_path)
    check = [(f.kind.name, f.culprit_ranks) for f in run_checks(t).findings]
    hang = [(f.kind.name, f.culprit_ranks) for f in analyze(t).findings]
    return check, hang


def _gather(r: int, ins=None, outs=None, dtype="Float", flat=False):
    own = [[SIZES[r] if ins is None else ins, 8]]
    shared = [[sum(SIZES), 8]] if flat else [[s, 8] for s in (outs or SIZES)]
    return entry(0, "all_gather_v", 1, own, shared, dtype=dtype)


def _scatter(r: int, flat=False):
    shared = [[sum(SIZES), 8]] if flat else [[s, 8] for s in SIZES]
    return entry(0, "reduce_scatter_v", 1, shared, [[SIZES[r], 8]])


@pytest.mark.parametrize("flat", [False, True], ids=["per_member", "flat"])
def test_uneven_v_collectives_are_healthy(tmp_path, flat):
    per = {r: [_gather(r, flat=flat), dict(_scatter(r, flat=flat), collective_seq_id=2)] for r in range(4)}
    assert _verdicts(tmp_path, per, config(4)) == ([], [])


@pytest.mark.parametrize(
    "case, want",
    [
        ("own_size_off", [("shape_mismatch", [2])]),  # rank 2 sends 5 rows where its chunk is 4
        ("flat_sum_off", [("shape_mismatch", [0, 1, 2, 3])]),  # flat: who is off cannot be told
        ("outputs_disagree", [("shape_mismatch", [1])]),
        ("dtype", [("dtype_mismatch", [3])]),
    ],
)
def test_real_mismatches_of_uneven_collectives_are_found(tmp_path, case, want):
    def one(r):
        if case == "own_size_off":
            return _gather(r, ins=SIZES[r] + (r == 2))
        if case == "flat_sum_off":
            return _gather(r, ins=SIZES[r] + (r == 2), flat=True)
        if case == "outputs_disagree":
            return _gather(r, outs=[3, 1, 4, 5] if r == 1 else None)
        return _gather(r, dtype="Half" if r == 3 else "Float")

    check, _ = _verdicts(tmp_path, {r: [one(r)] for r in range(4)}, config(4))
    assert check == want


def _send(rid, src, dst, p2p, state="completed", n=16):
    return entry(rid, f"send {src}->{dst}", 0, [[n]], [[n]], state, p2p_seq=p2p)


def _recv(rid, dst, src, p2p, state="completed", n=16):
    return entry(rid, f"recv {dst}<-{src}", 0, [[n]], [[n]], state, p2p_seq=p2p)


def test_pipeline_p2p_size_mismatch_is_one_verdict(tmp_path):
    """4 stages: rank 2 receives 32 elements from rank 1, which sends 16 (every other transfer
    moves 16): both sides stuck `started`, rank 0 behind rank 1, rank 3 behind rank 2."""
    ar = entry(0, "all_reduce", 1, [[4]], [[4]])
    per = {
        0: [ar, _send(1, 0, 1, 1), _send(2, 0, 1, 2, "started")],
        1: [ar, _recv(1, 1, 0, 1), _send(2, 1, 2, 2, "started"), _recv(3, 1, 0, 3, "scheduled")],
        2: [ar, _recv(1, 2, 1, 1, "started", n=32), _send(2, 2, 3, 2, "scheduled")],
        3: [ar, _recv(1, 3, 2, 1, "started")],
    }
    check, hang = _verdicts(tmp_path, per, config(4))
    assert check == [("p2p_mismatch", [2])]
    assert hang == [("p2p_mismatch", [2])]


def test_p2p_pair_in_flight_is_no_cycle(tmp_path):
    """Two ranks in the two sides of one transfer, neither completed, sizes agreeing: in flight."""
    per = {0: [_send(0, 0, 1, 1, "started")], 1: [_recv(0, 1, 0, 1, "started")]}
    assert _verdicts(tmp_path, per, config(2)) == ([], [])


def test_gloo_skipped_collective_hangs_at_the_next_one(tmp_path):
    """gloo (entries never updated, pg_status counts completions): rank 2 skipped an all_reduce;
    the others hold one more, none of the last ones completed. check and hang: rank 2."""

    def ar(rid, seq):
        return entry(rid, "all_reduce", seq, [[4]], [[4]], "scheduled", backend="gloo", pg=("0", "default_pg"))

    per = {r: [ar(i, i + 1) for i in range(3 if r != 2 else 2)] for r in range(4)}
    status = {"0": {"last_enqueued_collective": 3, "last_started_collective": -1, "last_completed_collective": 1}}
    check, hang = _verdicts(tmp_path, per, {"": {"name": "", "desc": "", "ranks": "[]"}}, status)
    assert check == [("missing_collective", [2])]
    assert hang == check
