"""Local mode (LocalTensorMode: one process, every rank) records every collective of the op table
(issue 27 item 3): the coalesced forms (all_gather_coalesced, which torch 2.13's LocalTensorMode
lacks, computed per rank here), the list forms, and functional collectives fed another's
un-waited result (an AsyncCollectiveTensor: recorded once, where torch dispatches it again).

Each program checks every result against what real ranks compute while it runs in local mode
(its `check`), so a recording without errors is one with the right per-rank values. The
comm patterns below are derived by hand; the fake-mode recording of the same program is the
same event for event, and neither has a finding."""

import pytest
import torch
from conftest import sig, stream

from analyzer.checks import run_checks
from analyzer.loader import load

F32 = "float32"
WAIT = ("wait", None, -1, -1, None, None, None, None, 0)


def _coalesced(rank: int) -> list[tuple]:
    return [
        ("all_gather_coalesced", "dp", 0, -1, F32, [[2], [3]], [[2], [3]] * 4, None, 0),
        ("all_reduce_coalesced", "dp", 1, -1, F32, [[2], [3]], [[2], [3]], "sum", 0),
        ("all_reduce_coalesced", "dp", 2, -1, F32, [[4], [8]], [[4], [8]], "sum", 0),  # _coalescing_manager
        ("all_gather_into_tensor_coalesced", "dp", 3, -1, F32, [[4], [8]], [[16], [32]], None, 1),
        WAIT,  # cm.wait()
        ("reduce_scatter_tensor_coalesced", "dp", 4, -1, F32, [[4], [8]], [[1], [2]], "sum", 0),
    ]


def _lists(rank: int) -> list[tuple]:
    root = rank == 0
    return [
        ("all_gather", "dp", 0, -1, F32, [[3]], [[3]] * 4, None, 0),
        ("reduce_scatter", "dp", 1, -1, F32, [[2]] * 4, [[2]], "sum", 0),
        ("gather", "dp", 2, 0, F32, [[3]], [[3]] * 4 if root else [], None, 0),
        ("scatter", "dp", 3, 0, F32, [[2]] * 4 if root else [], [[2]], None, 0),
        ("all_to_all", "dp", 4, -1, F32, [[2]] * 4, [[2]] * 4, None, 0),
        ("broadcast", "dp", 5, 2, F32, [[4]], [[4]], None, 0),
    ]


def _async_chain(rank: int) -> list[tuple]:
    return [
        ("all_gather_into_tensor", "tp", 0, -1, F32, [[2]], [[8]], None, 1),
        WAIT,  # the chained all_reduce waits for its input first
        ("all_reduce", "tp", 1, -1, F32, [[8]], [[8]], "sum", 1),
        WAIT,
        ("all_reduce", "tp", 2, -1, F32, [[4]], [[4]], "sum", 1),
        WAIT,
        ("reduce_scatter_tensor", "tp", 3, -1, F32, [[4]], [[1]], "sum", 1),
        WAIT,
        ("all_gather_into_tensor", "tp", 4, -1, F32, [[2]], [[8]], None, 1),
        WAIT,
        ("all_to_all_single", "tp", 5, -1, F32, [[8]], [[8]], None, 1),
        WAIT,
        ("all_reduce", "tp", 6, -1, F32, [[2]], [[2]], "max", 1),
        WAIT,
        ("broadcast", "tp", 7, 1, F32, [[2]], [[2]], None, 1),
        WAIT,
        ("all_gather_into_tensor", "tp", 8, -1, F32, [[2]], [[8]], None, 1),
        WAIT,
        ("all_reduce_coalesced", "tp", 9, -1, F32, [[8], [2]], [[8], [2]], "sum", 1),
        WAIT,  # once for both outputs
        ("all_reduce", "tp", 10, -1, F32, [[2]], [[2]], "sum", 1),
        WAIT,
        ("all_gather_into_tensor_coalesced", "tp", 11, -1, F32, [[2], [2]], [[8], [8]], None, 1),
        WAIT,
        ("reduce_scatter_tensor_coalesced", "tp", 12, -1, F32, [[4], [8]], [[1], [2]], "sum", 1),
        WAIT,
    ]


CASES = {"local_coalesced": _coalesced, "local_lists": _lists, "local_async_chain": _async_chain}
SKIP = {"ts", "rank", "label", "ranks"}
NOT_COMM = {"init_process_group", "mesh"}


@pytest.mark.parametrize("name", list(CASES))
def test_local_mode_records_it_with_real_values_and_as_fake_mode_does(recorded, name):
    (fake_path, fake_res), (local_path, local_res) = recorded(name, 4, "fake"), recorded(name, 4, "local")
    assert local_res.errors == {}, local_res.errors  # every per-rank value checked in the program held
    assert fake_res.errors == {}, fake_res.errors
    fake, local = load(fake_path), load(local_path)
    assert run_checks(local).findings == [] and run_checks(fake).findings == []
    for rank in range(4):
        events = [e for e in stream(local, rank) if e["op"] not in NOT_COMM]
        assert [sig(e) for e in events] == CASES[name](rank)
        comm = {e["idx"] for e in events if e["op"] != "wait"}
        assert all(e["ref"] in comm for e in events if e["op"] == "wait")
        a, b = stream(fake, rank), stream(local, rank)
        assert [{k: v for k, v in x.items() if k not in SKIP} for x in a] == [
            {k: v for k, v in y.items() if k not in SKIP} for y in b
        ]


def test_the_chained_collective_is_recorded_once_at_its_line(recorded):
    path, _ = recorded("local_async_chain", 4, "local")
    ev = [e for e in stream(load(path), 3) if e["op"] not in NOT_COMM]
    # line 25: all_reduce(all_gather_tensor(x)) -- the gather, the wait for it, the reduce, all at 25
    assert [(e["op"], e["frame"].rsplit(":", 1)[1]) for e in ev[:3]] == [
        ("all_gather_into_tensor", "25 in <module>"),
        ("wait", "25 in <module>"),
        ("all_reduce", "25 in <module>"),
    ]


def test_all_gather_coalesced_values_per_rank():
    """The computation torch 2.13's LocalTensorMode lacks, checked directly: output list k of
    every member of each group holds member k's inputs (two groups of 2 in a world of 4)."""
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from tracer.local import ops as local_ops

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        halves = dist.new_group([0, 1]), dist.new_group([2, 3])
        with LocalTensorMode(4) as mode:
            with mode.disable():
                a = LocalTensor({r: torch.full((2,), float(r)) for r in range(4)})
                b = LocalTensor({r: torch.full((3,), 10.0 * r) for r in range(4)})
                outs = [[LocalTensor({r: torch.zeros(n) for r in range(4)}) for n in (2, 3)] for _ in range(2)]
            local_ops._all_gather_coalesced({"output_lists": outs, "input_list": [a, b], "process_group": halves[0]})
        for r in range(4):
            first = 0 if r < 2 else 2  # the lowest member of r's group
            for k in range(2):
                assert outs[k][0]._local_tensors[r].tolist() == [float(first + k)] * 2
                assert outs[k][1]._local_tensors[r].tolist() == [10.0 * (first + k)] * 3
    finally:
        dist.destroy_process_group()


def test_a_scatter_whose_list_local_mode_cannot_hold_is_refused_in_one_line(recorded):
    """Rooted at rank 1, the scatter list is only in rank 1's Python; local mode used to record
    the scatter with its outputs left as they were (wrong values, silently)."""
    path, res = recorded("local_scatter_root", 4, "local")
    assert res.errors.keys() == {0, 1, 2, 3}
    assert res.errors[0].startswith(
        "rank 0: RecordError: local mode cannot record this scatter: its root (src 1 of its group) holds the "
        "scatter list, and local mode runs rank 0's Python (a non-root here) for every rank; root it at rank 0, "
        "or record this program with --mode real (every rank's real values) or --mode fake (the comm pattern) "
        "(tests/programs/local_scatter_root.py:11 in <module>)"
    )
    assert "scatter" not in [e["op"] for e in stream(load(path), 0)]
    path, res = recorded("local_scatter_root", 4, "fake")
    assert res.errors == {}
    assert [sig(e) for e in stream(load(path), 2) if e["op"] == "scatter"] == [
        ("scatter", "tp", 0, 1, F32, [], [[2, 1]], None, 0)
    ]
