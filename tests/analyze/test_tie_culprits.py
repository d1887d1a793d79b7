"""Culprits across groups (analyzer/checks/tie_culprits.py): a rank named by every tie of its kind
is singled out; everything else stays as each group's own evidence says. Expectations by hand."""

from analyzer.checks import run_checks
from analyzer.checks.tie_culprits import tie_culprits
from analyzer.loader import load

DT = {"dtype_mismatch"}


def test_the_rank_in_both_ties_of_a_2x2_mesh_is_the_culprit_of_both():
    # tp {2,3} and dp {1,3} tie; rank 3 is in both
    assert tie_culprits({1: ([2, 3], DT), 2: ([1, 3], DT)}) == {1: ([3], [1, 2]), 2: ([3], [1, 2])}


def test_one_tie_alone_decides_nothing():
    assert tie_culprits({1: ([2, 3], DT)}) == {}
    # two ties that share no rank: two independent questions, neither decided
    assert tie_culprits({1: ([0, 1], DT), 2: ([2, 3], DT)}) == {}


def test_a_connected_set_with_no_rank_in_every_tie_decides_nothing():
    # ranks 0 and 3 both deviate on a 2x2 mesh: the four ties form one ring, no rank is in all
    ring = {1: ([0, 1], DT), 2: ([2, 3], DT), 3: ([0, 2], DT), 4: ([1, 3], DT)}
    assert tie_culprits(ring) == {}


def test_kinds_are_not_evidence_about_each_other():
    assert tie_culprits({1: ([2, 3], DT), 2: ([1, 3], {"op_mismatch"})}) == {}
    # a group whose tie gave two kinds is decided only where both name the same culprit
    both = {"dtype_mismatch", "reduce_op_mismatch"}
    assert tie_culprits({1: ([2, 3], both), 2: ([1, 3], DT)}) == {2: ([3], [1, 2])}
    assert tie_culprits({1: ([2, 3], both), 2: ([1, 3], DT), 3: ([3, 5], {"reduce_op_mismatch"})}) == {
        1: ([3], [1, 2, 3]),  # both of its kinds decided it
        2: ([3], [1, 2]),
        3: ([3], [1, 3]),
    }


def test_separate_components_of_one_kind_are_decided_separately():
    ties = {1: ([0, 1], DT), 2: ([0, 2], DT), 3: ([5, 6], DT), 4: ([6, 7], DT), 5: ([8, 9], DT)}
    assert tie_culprits(ties) == {1: ([0], [1, 2]), 2: ([0], [1, 2]), 3: ([6], [3, 4]), 4: ([6], [3, 4])}


def test_a_2_against_2_group_shares_its_culprits_with_a_pair():
    # {0,1,2,3} splits 2:2 (every member named), {3,7} ties: rank 3 is named by both
    assert tie_culprits({1: ([0, 1, 2, 3], DT), 2: ([3, 7], DT)}) == {1: ([3], [1, 2]), 2: ([3], [1, 2])}


def _found(path):
    return [
        (f.kind.name, f.culprit_ranks, f.seq, f.group["label"], f.group["ranks"])
        for f in run_checks(load(path)).findings
    ]


def test_only_bf16_rank_of_the_world_is_singled_out_on_2_rank_groups(recorded):
    path, _ = recorded("bug_dtype_pairs", 4, "fake")
    found = run_checks(load(path)).findings
    assert _found(path) == [("dtype_mismatch", [3], 0, "dp", [1, 3]), ("dtype_mismatch", [3], 0, "tp", [2, 3])]
    for f in found:
        assert f.expected == "float32" and f.actual == {3: "bfloat16"}
        assert "but rank 3: bfloat16 (no majority in this group; rank 3, named by every tie" in f.message
        assert "dp (ranks 1,3), tp (ranks 2-3), singled out)" in f.message


def test_a_skip_on_both_pairs_is_the_skipping_ranks_not_its_peers_extra(recorded):
    path, _ = recorded("bug_skip_pairs", 4, "fake")
    found = run_checks(load(path)).findings
    assert _found(path) == [("missing_collective", [0], 1, "dp", [0, 2]), ("missing_collective", [0], 1, "tp", [0, 1])]
    assert [f.detail for f in found] == ["skipped", "skipped"]
    assert found[0].message.startswith(
        "rank 0 skipped all_reduce #1 on dp (ranks 0,2) (tests/programs/bug_skip_pairs.py:19"
    )
    assert found[1].message.startswith(
        "rank 0 skipped all_reduce #1 on tp (ranks 0-1) (tests/programs/bug_skip_pairs.py:18"
    )


def test_an_all_to_all_pair_that_disagrees_on_both_groups_names_the_rank_in_both(recorded):
    path, _ = recorded("bug_a2a_pairs", 4, "fake")
    found = run_checks(load(path)).findings
    assert _found(path) == [("split_mismatch", [3], 0, "dp", [1, 3]), ("split_mismatch", [3], 0, "tp", [2, 3])]
    assert [f.actual for f in found] == [{3: ["3->1: sends 3, expected 2"]}, {3: ["3->2: sends 3, expected 2"]}]
    assert all("culprit rank 3 (no majority in this group; rank 3, named by every tie" in f.message for f in found)
