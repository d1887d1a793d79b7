"""Object collectives deliver what the sending ranks really sent (fake mode: a channel between
the rank processes; local mode: LocalTensor), recorded as the tensor collectives torch issues
for them; programs whose control flow depends on the received values run as for real."""

import pytest
from conftest import stream

from analyzer.checks import run_checks
from analyzer.loader import load

W = ("world", (0, 1, 2, 3))
P = "pickle"  # a pickled object's bytes: uint8 of the pickle's length


def shape(e, which):
    shapes = e[which]
    return P if e["dtype"] == "uint8" and shapes else tuple(tuple(s) for s in shapes)


def pattern(t, rank):
    return [
        (
            e["op"],
            e["group"][0] if e["group"] else None,
            e["peer"],
            e["dtype"],
            shape(e, "in_shapes"),
            shape(e, "out_shapes"),
        )
        for e in stream(t, rank)
        if e["op"] not in ("wait", "init_process_group")
    ]


def objects_expected(rank: int) -> list[tuple]:
    one, i64 = ((1,),), "int64"
    sizes4 = ((1,),) * 4
    out = [
        ("broadcast", "world", 0, i64, one, one),
        ("broadcast", "world", 0, "uint8", P, P),  # config
        ("all_gather", "world", -1, i64, one, sizes4),
        ("all_gather", "world", -1, "uint8", P, P),  # counts
        ("all_gather", "world", -1, i64, one, sizes4),  # gather_object: sizes to everyone,
        ("gather", "world", 0, "uint8", P, P if rank == 0 else ()),  # bytes to rank 0
        ("broadcast", "world", 0, i64, one, one),  # scatter_object_list: the max size,
        ("scatter", "world", 0, "uint8", P if rank == 0 else (), P),  # the bytes,
        ("scatter", "world", 0, i64, sizes4 if rank == 0 else (), one),  # each object's size
    ]
    peer = rank + 1 if rank % 2 == 0 else rank - 1
    work = (peer if rank % 2 else rank) + 1  # the even rank's scattered work item
    if rank % 2 == 0:
        out += [
            ("send", "world", peer, i64, one, ()),
            ("send", "world", peer, "uint8", P, ()),
            ("recv", "world", peer, "float32", (), ((work, 6),)),
        ]
    else:
        out += [
            ("recv", "world", peer, i64, (), one),
            ("recv", "world", peer, "uint8", (), P),
            ("send", "world", peer, "float32", ((work, 6),), ()),
        ]
    out += [("all_reduce", "world", -1, "float32", ((6,),), ((6,),))] * 3  # cfg["steps"] of cfg["width"]
    out += [("all_reduce", "world", -1, "float32", ((2,),), ((2,),))] * 4  # max(counts)
    return out


def test_object_collectives_drive_control_flow_in_fake_mode(recorded):
    path, res = recorded("objects", 4, "fake")
    assert res.errors == {}
    t = load(path)
    for rank in range(4):
        assert pattern(t, rank) == objects_expected(rank), rank
    assert run_checks(t).findings == []


def test_object_sizes_are_what_the_sender_pickled(recorded):
    """The receivers' byte buffers are as long as the root's pickle: the size tensor arrived."""
    t = load(recorded("objects", 4, "fake")[0])
    root = [e for e in stream(t, 0) if e["op"] == "broadcast"]
    for rank in (1, 2, 3):
        got = [e for e in stream(t, rank) if e["op"] == "broadcast"]
        assert [e["out_shapes"] for e in got] == [e["out_shapes"] for e in root]


def test_rank_dependent_object_program_refused_in_local_mode(recorded):
    path, res = recorded("objects", 4, "local")
    assert set(res.errors) == {0, 1, 2, 3}
    assert (
        "depends on its rank ($RANK at tests/programs/objects.py:17, branched on at tests/programs/objects.py:19; "
        in res.errors[0]
    )
    assert "--mode fake" in res.errors[0]


def spmd_expected(rank: int) -> list[tuple]:
    """scatter_object_list passes its scatter lists on the root only (torch's own code)."""
    one, i64 = ((1,),), "int64"
    root = rank == 0
    return (
        [
            ("broadcast", "world", 0, i64, one, one),
            ("broadcast", "world", 0, "uint8", P, P),
            ("all_gather", "world", -1, i64, one, ((1,),) * 4),
            ("all_gather", "world", -1, "uint8", P, P),
            ("broadcast", "world", 0, i64, one, one),
            ("scatter", "world", 0, "uint8", P if root else (), P),
            ("scatter", "world", 0, i64, ((1,),) * 4 if root else (), one),
        ]
        + [("all_reduce", "world", -1, "float32", ((12,),), ((12,),))] * 2
        + [("all_reduce", "world", -1, "float32", ((1,),), ((1,),))] * 3
    )


@pytest.mark.parametrize("mode", ["fake", "local"])
def test_spmd_object_program_in_both_modes(recorded, mode):
    path, res = recorded("objects_spmd", 4, mode)
    assert res.errors == {}
    t = load(path)
    for rank in range(4):
        assert pattern(t, rank) == spmd_expected(rank), rank
    assert run_checks(t).findings == []


def test_object_recv_without_sender_names_both_ranks(recorded):
    path, res = recorded("bug_object_never_sent", 2, "fake")
    assert set(res.errors) == {1}
    assert (
        "rank 1 waits for recv_object_list (its recv #0 on group 0) from rank 0, which finished without sending it"
    ) in res.errors[1]
    t = load(path)  # everything recorded up to the wait is kept
    assert [e["op"] for e in stream(t, 1)] == ["init_process_group", "all_reduce", "recv"]
    assert [e["op"] for e in stream(t, 0)] == ["init_process_group", "all_reduce"]


def test_object_waits_time_out_with_one_line_and_exit_2(tmp_path):
    import subprocess

    from conftest import BIN, REPO, program

    out = tmp_path / "both.trace"
    p = subprocess.run(
        [
            f"{BIN}/tracer",
            "record",
            "--script",
            program("bug_object_both_wait"),
            "-n",
            "2",
            "-j",
            "1",
            "--timeout",
            "7",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert p.returncode == 2
    first = [line for line in p.stderr.splitlines() if line.startswith("error: rank")]
    assert len(first) == 1 and "Traceback" not in p.stderr
    # both wait from the same moment (their small all_reduce's value travels first): either is first
    said = [
        f"rank {r} waited 7 s for recv_object_list (its recv #0 on group 0) from rank {1 - r}, which never sent it"
        for r in (0, 1)
    ]
    assert any(s in first[0] for s in said), first[0]
    # while they wait (5 s in), each says whom it waits for (the watchdog), though -j 1: a rank
    # waiting on the channel gives its core to the next rank, so both run at once
    waits = sorted(line.rsplit(" (", 1)[0] for line in p.stderr.splitlines() if " waits in " in line)
    assert waits == [
        "rank 0 waits in recv_object_list (its recv #0 on group 0) for rank 1",
        "rank 1 waits in recv_object_list (its recv #0 on group 0) for rank 0",
    ], p.stderr
    t = load(str(out) + ".parts") if not out.exists() else load(str(out))
    assert [e["op"] for e in stream(t, 0)] == ["init_process_group", "all_reduce", "recv"]
