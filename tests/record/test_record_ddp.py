"""DistributedDataParallel recorded in fake and local mode: exact comm patterns, derived by hand.

The MLP of tests/programs/ddp*.py: Linear(256,512), Linear(512,512) x2, Linear(512,16), i.e.
parameters w0 131072, b0 512, w1 262144, b1 512, w2 262144, b2 512, w3 8192, b3 16 floats
(665104 in all, 8 tensors of 2+1+2+1+2+1+2+1 = 12 dims).

What torch 2.13's DDP issues (nn/parallel/distributed.py, c10d reducer.cpp):
- construction: `_verify_params_across_processes` all-gathers the parameter count (int64 [1]) and
  broadcasts every parameter's sizes and strides (int64 [2 x 12 = 24]); `_sync_module_states`
  broadcasts the parameters from rank 0 as one flat float32 bucket (250 MiB cap). Each is a
  C++ `work->wait()`: async op, then its wait.
- iteration 1: one bucket holding every parameter (initial buckets are disabled unless
  find_unused_parameters), all-reduced when its last gradient arrives; its future is waited in
  finalize_backward at the end of backward.
- the forward of iteration 2 rebuilds the buckets in gradient arrival order, which is reversed
  parameter order (b3, w3, b2, w2, ...), capped at dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB for
  the first bucket and bucket_cap_mb (25) after: b3+w3+b2+w2 = 270864 floats crosses 1 MiB, the
  rest b1+w1+b0+w0 = 394240 is the second. The rebuilt layout is broadcast from rank 0: the
  indices plus the bucket count (int32 [8 + 1]), then the bucket sizes (int32 [buckets]).
"""

import pytest
from conftest import stream

from analyzer.checks import run_checks
from analyzer.loader import load

MLP = 665104
REBUILT = [270864, 394240]
# bucket_cap_mb=1: caps [1 MiB, 1 MiB]; b1+w1 = 262656 crosses the second, b0+w0 = 131584 is left
REBUILT_1MB = [270864, 262656, 131584]
# ddp_find_unused.py: trunk w0 131072 b0 512 w1 262144 b1 512, head w 8192 b 16, aux w 2048 b 4
# = 404500 floats; 8 tensors of 12 dims again (24 metadata entries)
UNUSED_TOTAL = 404500


def construction(total: int) -> list:
    return [
        ("all_gather", "int64", [[1]], [[1]] * 4, 0, "other"),
        "wait",
        ("broadcast", "int64", [[24]], [[24]], 0, "other"),
        "wait",
        ("broadcast", "float32", [[total]], [[total]], 0, "other"),
        "wait",
    ]


def ar(n: int, step: int, dtype: str = "float32") -> tuple:
    return ("all_reduce", dtype, [[n]], [[n]], step, "backward")


def rebuild(step: int, params: int, buckets: int) -> list:
    return [
        ("broadcast", "int32", [[params + 1]], [[params + 1]], step, "forward"),
        "wait",
        ("broadcast", "int32", [[buckets]], [[buckets]], step, "forward"),
        "wait",
    ]


def buckets(sizes: list[int], step: int, dtype: str = "float32") -> list:
    """Buckets all-reduced in order, their futures waited in order at the end of backward."""
    return [ar(n, step, dtype) for n in sizes] + ["wait"] * len(sizes)


EXPECTED = {
    "ddp": construction(MLP) + buckets([MLP], 0) + rebuild(1, 8, 2) + buckets(REBUILT, 1) + buckets(REBUILT, 2),
    # the no_sync micro-batch issues nothing; the rebuild waits for the first synced backward and
    # then runs in the next forward, which is step 1's no_sync forward
    "ddp_no_sync": (
        construction(MLP) + buckets([MLP], 0) + rebuild(1, 8, 3) + buckets(REBUILT_1MB, 1) + buckets(REBUILT_1MB, 2)
    ),
    # the hook all-reduces each bucket compressed to bf16 (the same element counts, half the bytes)
    "ddp_comm_hook": (
        construction(MLP)
        + buckets([MLP], 0, "bfloat16")
        + rebuild(1, 8, 2)
        + buckets(REBUILT, 1, "bfloat16")
        + buckets(REBUILT, 2, "bfloat16")
    ),
    # find_unused_parameters: initial buckets in parameter order with caps [1 MiB, 25 MiB]:
    # w0+b0+w1 = 393728 crosses 1 MiB, b1+head+aux = 10772; the Reducer takes them reversed. No
    # rebuild (never with find_unused). After the last bucket, the used-parameter map (int32
    # [8 tensors]) is all-reduced; all three are waited in finalize_backward.
    "ddp_find_unused": construction(UNUSED_TOTAL)
    + [
        x
        for step in range(3)
        for x in (
            ar(10772, step),
            ar(393728, step),
            ("all_reduce", "int32", [[8]], [[8]], step, "backward"),
            "wait",
            "wait",
            "wait",
        )
    ],
    # static_graph: iteration 1 delays every all-reduce to the end of backward (_delay_all_reduce:
    # the used map first, then the one bucket); iteration 2 records the arrival order; the rebuild
    # runs in the forward of iteration 3
    "ddp_static_graph": (
        construction(MLP)
        + [("all_reduce", "int32", [[8]], [[8]], 0, "backward"), ar(MLP, 0), "wait", "wait"]
        + buckets([MLP], 1)
        + rebuild(2, 8, 2)
        + buckets(REBUILT, 2)
    ),
}

CASES = [(name, mode) for name in EXPECTED for mode in ("fake", "local")]


def comm_pattern(events: list[dict]) -> list:
    """Collectives as (op, dtype, in, out, step, phase), waits as 'wait'; every collective async
    on the world group, numbered in order, and every wait pointing at one of them (checked)."""
    out, by_idx, seq = [], {}, 0
    for e in events:
        if e["op"] == "wait":
            assert e["ref"] in by_idx, e
            out.append("wait")
        elif e["group"] is not None and e["op"] != "init_process_group":
            assert e["group"] == ("world", (0, 1, 2, 3)) and e["seq"] == seq and e["async_op"] == 1, e
            seq += 1
            by_idx[e["idx"]] = e
            out.append((e["op"], e["dtype"], e["in_shapes"], e["out_shapes"], e["step"], e["phase"]))
    return out


@pytest.mark.parametrize("name,mode", CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_ddp_exact_pattern(recorded, name, mode):
    path, res = recorded(name, 4, mode)
    assert res.errors == {}
    t = load(path)
    assert run_checks(t).findings == []
    for rank in range(4):
        events = stream(t, rank)
        assert comm_pattern(events) == EXPECTED[name]
        # each wait follows the collective it waits on, and waits come in issue order
        waits = [e["ref"] for e in events if e["op"] == "wait"]
        assert waits == sorted(waits)
        assert [e["ref"] for e in events if e["op"] == "wait"] == [
            e["idx"] for e in events if e["op"] not in ("wait", "init_process_group")
        ]


def test_ddp_attribution_and_bytes(recorded):
    t = load(recorded("ddp_comm_hook", 4, "fake")[0])
    events = stream(t, 2)
    init, gather = events[0], events[1]
    assert init["frame"].endswith("ddp_comm_hook.py:18 in main")
    assert gather["frame"].endswith("ddp_comm_hook.py:20 in main")  # model = DDP(mlp())
    bucket = [e for e in events if e["op"] == "all_reduce"]
    assert all(e["frame"].endswith("ddp_comm_hook.py:26 in main") for e in bucket)  # loss.backward()
    assert [e["in_bytes"] for e in bucket] == [2 * MLP] + [2 * n for n in REBUILT] * 2
    rebuilt = [e for e in events if e["op"] == "broadcast" and e["dtype"] == "int32"]
    assert all(e["frame"].endswith("ddp_comm_hook.py:25 in main") and e["peer"] == 0 for e in rebuilt)


@pytest.mark.parametrize("mode", ["fake", "local"])
def test_work_and_future_behave_like_real_ones(recorded, mode):
    """The program asserts the semantics itself (values, then() chains, wait() is True, a
    callback's exception reaching wait()); here: it ran, and every wait is where it was made."""
    path, res = recorded("work_future", 4, mode)
    assert res.errors == {}
    t = load(path)
    for rank in range(4):
        events = stream(t, rank)
        ops = [(e["op"], e["frame"].rsplit(":", 1)[-1].split()[0]) for e in events[1:]]
        # all_reduce (13), waited through a then() chain (19); all_gather (24) waited on its
        # future (25); all_reduce (32) whose chain raised, waited on by the failing wait (34)
        assert ops == [
            ("all_reduce", "13"),
            ("wait", "19"),
            ("all_gather_into_tensor", "24"),
            ("wait", "25"),
            ("all_reduce", "32"),
            ("wait", "34"),
        ]
