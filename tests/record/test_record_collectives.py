"""Exact comm patterns of the c10d API, p2p, groups and rank-dependent branches, derived by hand."""

import pytest
from conftest import sig, stream

from analyzer.loader import load

COMM = {
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "send",
    "recv",
}


def expected_collectives(rank: int) -> list[tuple]:
    f32, world = "float32", "world"
    scatter_root = rank == 3
    return [
        ("all_reduce", world, 0, -1, f32, [[8]], [[8]], "sum", 0),
        ("all_reduce", world, 1, -1, f32, [[8]], [[8]], "max", 1),
        ("all_gather", world, 2, -1, f32, [[8]], [[8]] * 4, None, 0),
        ("all_gather_into_tensor", world, 3, -1, f32, [[8]], [[32]], None, 0),
        ("reduce_scatter", world, 4, -1, f32, [[8]] * 4, [[8]], "sum", 0),
        ("reduce_scatter_tensor", world, 5, -1, f32, [[8]], [[2]], "sum", 0),
        ("broadcast", world, 6, 1, f32, [[8]], [[8]], None, 0),
        ("gather", world, 7, 0, f32, [[8]], [[8]] * 4 if rank == 0 else [], None, 0),
        ("scatter", world, 8, 3, f32, [[8]] * 4 if scatter_root else [], [[8]], None, 0),
        ("all_to_all", world, 9, -1, f32, [[2]] * 4, [[2]] * 4, None, 0),
        ("all_to_all_single", world, 10, -1, f32, [[8]], [[8]], None, 0),
        ("all_to_all_single", world, 11, -1, f32, [[12]], [[12]], None, 0),
        ("all_reduce_coalesced", world, 12, -1, f32, [[3], [5]], [[3], [5]], "sum", 0),
        ("barrier", world, 13, -1, None, [], [], None, 0),
        ("all_reduce", world, 14, -1, "float64", [[4]], [[4]], "sum", 0),
    ]


def test_every_collective_on_every_rank(recorded):
    mode = "fake"
    path, res = recorded("collectives", 4, mode)
    assert res.errors == {}
    t = load(path)
    assert t.ranks == [0, 1, 2, 3] and not t.truncated and t.header["mode"] == mode
    for rank in range(4):
        events = stream(t, rank)
        assert events[0]["op"] == "init_process_group" and events[0]["group"] == ("world", (0, 1, 2, 3))
        comm = [e for e in events if e["op"] in COMM]
        assert [sig(e) for e in comm] == expected_collectives(rank)
        a2a = [e for e in comm if e["op"] == "all_to_all_single"]
        assert a2a[0]["splits"] == [[2, 2, 2, 2], [2, 2, 2, 2]]
        assert a2a[1]["splits"] == [[3, 3, 3, 3], [3, 3, 3, 3]]
        assert comm[3]["in_bytes"] == 32 and comm[3]["out_bytes"] == 128
        assert comm[12]["batch"] >= 0 and comm[0]["batch"] == -1
        # the async all_reduce is waited on right after, and the wait points at it
        waits = [e for e in events if e["op"] == "wait"]
        assert [w["ref"] for w in waits] == [comm[1]["idx"]]
        assert comm[0]["frame"].endswith("collectives.py:8 in <module>")
        assert all(e["phase"] == "other" and e["step"] == 0 for e in comm)


def test_reduce_in_fake_mode(recorded):
    path, res = recorded("reduce", 4, "fake")
    t = load(path)
    for rank in range(4):
        (e,) = [e for e in stream(t, rank) if e["op"] in COMM]
        assert sig(e) == ("reduce", "world", 0, 2, "float32", [[3]], [[3]], "sum", 0)


def test_p2p_ring_fake_mode(recorded):
    path, res = recorded("p2p", 4, "fake")
    assert res.errors == {}
    t = load(path)
    for rank in range(4):
        nxt, prv = (rank + 1) % 4, (rank - 1) % 4
        comm = [e for e in stream(t, rank) if e["op"] in COMM]
        first = [
            ("send", "world", 0, nxt, "float32", [[4]], [], None, 0),
            ("recv", "world", 0, prv, "float32", [], [[4]], None, 0),
        ]
        assert [sig(e) for e in comm] == (first if rank % 2 == 0 else first[::-1]) + [
            ("send", "world", 1, nxt, "float32", [[2, 3]], [], None, 1),
            ("recv", "world", 1, prv, "float32", [], [[2, 3]], None, 1),
            ("send", "world", 2, nxt, "float32", [[5]], [], None, 1),
            ("recv", "world", 2, prv, "float32", [], [[5]], None, 1),
        ]
        assert [e["tag"] for e in comm[2:4]] == [7, 7]
        assert comm[4]["batch"] == comm[5]["batch"] >= 0 and comm[2]["batch"] == -1
        waits = [e["ref"] for e in stream(t, rank) if e["op"] == "wait"]
        assert waits == [e["idx"] for e in comm[2:]]  # only the async ones are waited on


def test_p2p_refused_in_local_mode(recorded):
    path, res = recorded("p2p", 4, "local")
    assert set(res.errors) == {0, 1, 2, 3}
    # its peers are computed from its rank: refused where the rank first steers it
    assert (
        "depends on its rank (dist.get_rank() at tests/programs/p2p.py:6, branched on at tests/programs/p2p.py:9; "
        "the ranks take different sides of an if/else)" in res.errors[0]
    )
    assert "--mode fake" in res.errors[0]


def test_rank_dependent_arguments_refused_in_local_mode(recorded):
    """collectives.py passes gather_list / scatter_list on the root only (`if rank == 0`): local
    mode would give every rank rank 0's side, so it refuses, naming the read and the use."""
    path, res = recorded("collectives", 4, "local")
    assert set(res.errors) == {0, 1, 2, 3}
    assert (
        "depends on its rank (dist.get_rank() at tests/programs/collectives.py:6, branched on at "
        "tests/programs/collectives.py:15; only the test of an `if`"
    ) in res.errors[0]
    assert "--mode fake" in res.errors[0]
    t = load(path)  # what ran before the refusal is kept
    assert [e["op"] for e in stream(t, 2)][-1] == "broadcast"


def test_rank_dependent_branch_only_on_that_rank(recorded):
    path, _ = recorded("rank_branch", 4, "fake")
    t = load(path)
    for rank in range(4):
        comm = [e for e in stream(t, rank) if e["op"] in COMM]
        assert [e["seq"] for e in comm] == ([0, 1, 2] if rank == 1 else [0, 1])
        assert [e["frame"].rsplit(":", 1)[-1] for e in comm] == (
            ["7 in <module>", "9 in <module>", "10 in <module>"] if rank == 1 else ["7 in <module>", "10 in <module>"]
        )


@pytest.mark.parametrize("mode", ["fake", "local"])
def test_group_creation_and_mesh_ops(recorded, mode):
    path, res = recorded("groups", 8, mode)
    assert res.errors == {}
    t = load(path)
    for rank in range(8):
        ev = stream(t, rank)
        made = [
            (e["op"], e["group"][0], e["group"][1], e["info"]["member"])
            for e in ev
            if e["op"] in ("init_process_group", "new_group", "split_group")
        ]
        half = (0, 1, 2, 3) if rank < 4 else (4, 5, 6, 7)
        assert made == [
            ("init_process_group", "dp_tp", tuple(range(8)), True),  # the world: the flattened mesh's group
            ("new_group", "evens", (0, 2, 4, 6), rank % 2 == 0),
            ("new_group", "odds", (1, 3, 5, 7), rank % 2 == 1),
            ("split_group", "halves", half, True),
            *[("new_group", "dp", (c, c + 4), rank % 4 == c) for c in range(4)],
            ("new_group", "tp", (0, 1, 2, 3), rank < 4),
            ("new_group", "tp", (4, 5, 6, 7), rank >= 4),
        ]
        meshes = [e["info"] for e in ev if e["op"] == "mesh"]
        assert meshes == [
            {"how": "init", "shape": [2, 4], "dims": ["dp", "tp"], "ranks": list(range(8))},
            {"how": "slice", "shape": [4], "dims": ["tp"], "ranks": list(half)},
            {"how": "flatten", "shape": [8], "dims": ["dp_tp"], "ranks": list(range(8))},
        ]
        comm = [(e["op"], e["group"][0], e["group"][1], e["in_shapes"]) for e in ev if e["op"] in COMM]
        assert comm == [
            ("all_reduce", "halves", half, [[3]]),
            ("all_reduce", "tp", half, [[4]]),
            ("all_reduce", "dp_tp", tuple(range(8)), [[5]]),
        ]


def test_ranks_subset(recorded):
    path, res = recorded("collectives", 4, "fake", ranks=[1, 3])
    t = load(path)
    assert t.ranks == [1, 3] and t.header["ranks"] == [1, 3] and t.missing_ranks == []
    assert [sig(e) for e in stream(t, 3) if e["op"] in COMM] == expected_collectives(3)
