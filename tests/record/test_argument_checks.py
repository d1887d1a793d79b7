"""Arguments NCCL / Gloo reject fail the dry run too (issue 27 item 4): at the program's line,
with torch's exception type and words, in fake and in local mode, and `analyzer check` reports
the rank as a `failed_rank` with that reason (exit 1). Valid programs are untouched (every other
recording test; here the valid corner cases the checks must let through: uneven all_gather_v
lists, a gather's list on the root only, default a2a splits)."""

import json
import re

import pytest
import torch
from conftest import run_tracer

from tracer.capture import arg_checks

# program, line of the bad call, what torch says there
RAISES = [
    (
        "raises_a2a_splits",
        10,
        "RuntimeError: Split sizes doesn't match total dim 0 size (all_to_all_single: input_split_sizes "
        "[3, 2, 2, 2] sum to 9, the input's dim 0 is 8)",
    ),
    (
        "raises_list_length",
        10,
        "RuntimeError: all_gather: invalid output tensor list at index 0 (expected length 4, got 3)",
    ),
    (
        "raises_reduce_scatter",
        11,
        "ValueError: input tensor must be the same size as output size times world size (reduce_scatter_tensor: "
        "input (9,) has 9 elements, output (2,) x 4 ranks = 8)",
    ),
    ("raises_root", 10, "RuntimeError: broadcast: invalid root rank: 4 (the group has 4 ranks)"),
]


@pytest.mark.parametrize("mode", ["fake", "local"])
@pytest.mark.parametrize("name,line,why", RAISES, ids=[r[0] for r in RAISES])
def test_rejected_arguments_fail_the_rank_at_its_line(recorded, mode, name, line, why):
    path, res = recorded(name, 4, mode)
    where = f"(tests/programs/{name}.py:{line} in <module>)"
    assert res.errors.keys() == {0, 1, 2, 3}  # every rank passed the same bad arguments
    assert all(f"{why} {where}" in e for e in res.errors.values()), res.errors
    p = run_tracer("analyzer", "check", path, "--json")
    assert p.returncode == 1, p.stderr
    found = json.loads(p.stdout)["findings"]
    assert [(f["kind"], f["culprit_ranks"]) for f in found] == [("failed_rank", [0, 1, 2, 3])]
    assert found[0]["message"].startswith(f"ranks 0-3 raised: {why} {where} (2 events kept)")


def test_one_ranks_bad_arguments_fail_that_rank_in_both_modes(recorded):
    """Rank 2's own splits (a per-rank value in local mode) are wrong: rank 2 is the failed rank
    with torch's reason in both modes; in fake mode the others go on (and rank 2 misses the
    collective they issue), in local mode they stop with it, saying so."""
    why = (
        "RuntimeError: Split sizes doesn't match total dim 0 size (all_to_all_single: input_split_sizes "
        "[2, 1, 1, 1] sum to 5, the input's dim 0 is 4) (tests/programs/raises_a2a_one_rank.py:16 in <module>)"
    )
    for mode, others in (("fake", []), ("local", [0, 1, 3])):
        path, res = recorded("raises_a2a_one_rank", 4, mode)
        assert sorted(res.errors) == sorted([2, *others]) and why in res.errors[2], res.errors
        found = json.loads(run_tracer("analyzer", "check", path, "--json").stdout)["findings"]
        kinds = sorted((f["kind"], f["culprit_ranks"]) for f in found)
        mine = next(f for f in found if f["kind"] == "failed_rank" and f["culprit_ranks"] == [2])
        assert mine["message"].startswith(f"rank 2 raised: {why}")
        if mode == "fake":
            assert kinds == [("failed_rank", [2]), ("missing_collective", [2])]
        else:
            assert kinds == [("failed_rank", [0, 1, 3]), ("failed_rank", [2])]
            assert res.errors[0].startswith(
                "rank 0: stopped with rank 2, whose arguments were rejected (local mode runs every rank in one process)"
            )
            from tracer.record.result import failure_lines

            assert failure_lines(res.failures)[0].startswith(f"rank 2: {why}")
            assert failure_lines(res.failures)[1].startswith("3 more ranks failed: 0-1,3 (stopped with it")


# ---- the rules, one rank's view ---------------------------------------------------------------
def _t(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype)


BAD = [
    # (op, size, rank, ins, outs, keywords, exception, torch's words)
    ("all_to_all_single", 4, 0, [_t(6)], [_t(8)], {}, RuntimeError, "Tensor's dim 0 does not divide equally"),
    ("all_to_all_single", 4, 0, [_t(8)], [_t(8)], {"splits": ([4, 4], [])}, RuntimeError, "Number of tensor splits"),
    ("all_to_all_single", 4, 0, [_t(8)], [_t(8)], {"splits": ([], [1, 1, 1, 1])}, RuntimeError, "Split sizes doesn't"),
    ("all_gather_into_tensor", 4, 1, [_t(2)], [_t(9)], {}, ValueError, "output tensor size must be equal to world"),
    ("all_gather_into_tensor", 4, 1, [_t(2)], [_t(8, dtype=torch.float64)], {}, TypeError, "output tensor must have"),
    ("all_gather_into_tensor_coalesced", 2, 0, [_t(2), _t(3)], [_t(4)], {}, RuntimeError, "same length"),
    ("reduce_scatter_tensor", 4, 0, [_t(8, dtype=torch.int64)], [_t(2)], {}, TypeError, "input tensor must be the"),
    ("reduce_scatter_tensor_coalesced", 2, 0, [_t(4), _t(5)], [_t(2), _t(2)], {}, ValueError, "times world size"),
    ("all_gather", 4, 0, [_t(3)], [[_t(2)] * 4], {}, RuntimeError, "invalid tensor size at index 0"),
    ("all_gather", 2, 1, [_t(3)], [[_t(3), _t(2)]], {}, RuntimeError, "this rank's own"),  # all_gather_v: own slot
    ("reduce_scatter", 4, 0, [[_t(2)] * 3], [_t(2)], {}, RuntimeError, "invalid input tensor list size"),
    ("all_gather_coalesced", 4, 0, [_t(2)], [[_t(2)]] * 3, {}, RuntimeError, "output lists should be equal"),
    ("all_gather_coalesced", 2, 0, [_t(2), _t(3)], [[_t(2)]] * 2, {}, RuntimeError, "invalid output size"),
    ("all_gather_coalesced", 2, 0, [_t(2)], [[_t(3)]] * 2, {}, RuntimeError, "invalid size of output tensor"),
    ("gather", 4, 2, [_t(3)], [[_t(3)] * 3], {"root": 2}, ValueError, "Incorrect output list size 3"),
    ("gather", 4, 0, [_t(3)], [], {"root": -1}, ValueError, "gather: invalid root rank: -1"),
    ("scatter", 4, 0, [[_t(3)] * 4], [_t(2)], {"root": 0}, ValueError, "invalid tensor size at index 0"),
    ("scatter", 4, 1, [], [_t(2)], {"root": 4}, ValueError, "scatter: invalid root rank: 4"),
    ("reduce", 2, 0, [_t(2)], [_t(2)], {"root": 2}, RuntimeError, "reduce: invalid root rank: 2"),
    ("all_to_all", 4, 0, [_t(2)] * 4, [_t(2)] * 3, {}, RuntimeError, "output tensor list size 3 does not match"),
    ("all_reduce_coalesced", 2, 0, [_t(2), _t(2, dtype=torch.float16)], [], {}, RuntimeError, "same type"),
    ("send", 4, 0, [], [], {"peer": 4}, ValueError, "Invalid destination rank: 4"),
    ("recv", 4, 0, [], [], {"peer": 7}, ValueError, "Invalid source rank: 7"),
]


@pytest.mark.parametrize("op,size,rank,ins,outs,kw,kind,words", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_each_rule_raises_torchs_type_and_words(op, size, rank, ins, outs, kw, kind, words):
    with pytest.raises(kind, match=re.escape(words)) as e:
        arg_checks.check(op, size, rank, ins, outs, **kw)
    assert type(e.value) is kind and "\n" not in str(e.value)


GOOD = [
    ("all_to_all_single", 4, 0, [_t(8, 2)], [_t(12, 2)], {"splits": ([2] * 4, [3] * 4)}),
    ("all_to_all_single", 4, 0, [_t(8)], [_t(4)], {}),  # equal splits: each side divides
    ("all_to_all_single", 4, 0, [_t(9)], [], {"splits": ([3, 2, 2, 2], [1] * 4)}),  # functional: no output yet
    ("all_to_all_single", 4, 0, [], [], {}),  # DTensor's shard_dim_alltoall: cut along its shard dim, not dim 0
    ("all_gather", 3, 1, [_t(2)], [[_t(4), _t(2), _t(1)]], {}),  # all_gather_v: sizes of their own
    ("reduce_scatter", 2, 0, [[_t(2), _t(5)]], [_t(2)], {}),  # reduce_scatter_v
    ("all_gather_into_tensor", 4, 0, [_t(2, 3)], [_t(8, 3)], {}),
    ("reduce_scatter_tensor_coalesced", 2, 1, [_t(4), _t(6)], [_t(2), _t(3)], {}),
    ("gather", 4, 1, [_t(3)], [], {"root": 0}),  # not the root: no list (Python checks that side)
    ("gather", 4, 1, [_t(3)], [[_t(3)] * 4], {"root": 0}),  # local mode: rank 0's list on every rank
    ("scatter", 4, 3, [[_t(2)] * 4], [_t(2)], {"root": 3}),
    ("broadcast", 4, 0, [_t(2)], [_t(2)], {"root": 3}),
    ("all_gather_coalesced", 2, 0, [_t(2), _t(3)], [[_t(2), _t(3)]] * 2, {}),
    ("barrier", 4, 0, [], [], {}),
    ("recv", 4, 0, [], [], {"peer": -1}),  # recv from any source
]


@pytest.mark.parametrize("op,size,rank,ins,outs,kw", GOOD, ids=[f"{g[0]}-{i}" for i, g in enumerate(GOOD)])
def test_valid_arguments_pass(op, size, rank, ins, outs, kw):
    arg_checks.check(op, size, rank, ins, outs, **kw)
