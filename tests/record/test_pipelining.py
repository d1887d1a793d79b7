"""torch.distributed.pipelining as users write it (tests/programs/pp_schedules.py: stock PipelineStage,
stock schedules), recorded in fake mode: every p2p of every rank, derived by hand, and no findings.

Stage s lives on rank s % world (looped schedules: 2 stages per rank). Every stage talks to its
neighbours s - 1 and s + 1, always on another rank. Per rank and in step 0 only, the handshake:
- the warm-up vote (int32 [1], blocking): forward s - 1 -> s, then the result back s + 1 -> s;
- without input_args, shape inference by object p2p (send_object_list / recv_object_list with
  use_batch: an int64 [1] size, then the pickled bytes as uint8), forward then backward.
Then per step and per microbatch: activations [mb, 16] float32 forward, gradients backward
(async isend / irecv).
"""

from collections import Counter

import pytest
from conftest import stream

from analyzer.checks import run_checks
from analyzer.loader import load

SCHEDULES = ["GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "LoopedBFS"]
LOOPED = {"Interleaved1F1B", "InterleavedZeroBubble", "LoopedBFS"}
M, STEPS, BATCH, DIM = 4, 2, 8, 16
P2P = ("send", "recv")


def expected(schedule: str, world: int, input_args: bool, rank: int) -> Counter:
    """(op, peer, dtype, shape, step) -> calls, for `rank`; shape "pickle" for object bytes."""
    per_rank = 2 if schedule in LOOPED else 1
    n = world * per_rank
    mine = [rank + i * world for i in range(per_rank)]
    c: Counter = Counter()

    def both(s, step, dtype, shape, k=1):  # what stage s exchanges with its neighbours
        if s > 0:
            c["recv", (s - 1) % world, dtype, shape, step] += k
        if s < n - 1:
            c["send", (s + 1) % world, dtype, shape, step] += k

    def back(s, step, dtype, shape, k=1):
        if s < n - 1:
            c["recv", (s + 1) % world, dtype, shape, step] += k
        if s > 0:
            c["send", (s - 1) % world, dtype, shape, step] += k

    for s in mine:
        both(s, 0, "int32", ((1,),))  # vote
        back(s, 0, "int32", ((1,),))  # vote result
        if not input_args:
            for direction in (both, back):
                direction(s, 0, "int64", ((1,),))
                direction(s, 0, "uint8", "pickle")
        for step in range(STEPS):
            both(s, step, "float32", ((BATCH // M, DIM),), M)
            back(s, step, "float32", ((BATCH // M, DIM),), M)
    return c


def observed(t, rank: int) -> Counter:
    c: Counter = Counter()
    for e in stream(t, rank, P2P):
        shape = e["in_shapes"] if e["op"] == "send" else e["out_shapes"]
        shape = "pickle" if e["dtype"] == "uint8" else tuple(tuple(s) for s in shape)
        c[e["op"], e["peer"], e["dtype"], shape, e["step"]] += 1
    return c


CASES = [(s, w, ia) for s in SCHEDULES for w in (2, 4) for ia in (False, True)]


@pytest.mark.parametrize(
    "schedule,world,input_args", CASES, ids=[f"{s}-{w}ranks-{'input_args' if ia else 'inferred'}" for s, w, ia in CASES]
)
def test_pipeline_schedule_records_every_p2p(recorded, schedule, world, input_args):
    args = ("--schedule", schedule, "--microbatches", str(M)) + (("--input-args",) if input_args else ())
    path, res = recorded("pp_schedules", world, "fake", args)
    assert res.errors == {}
    t = load(path)
    for rank in range(world):
        assert observed(t, rank) == expected(schedule, world, input_args, rank), rank
        ops = {e["op"] for e in stream(t, rank)}
        assert ops <= {"init_process_group", "send", "recv", "wait"}
    assert run_checks(t).findings == []


def test_pipeline_handshake_carries_the_inferred_shapes(recorded):
    """Without input_args the last stage learns its input shape from stage 0's pickled
    metadata: its activation recvs are [2, 16] because that is what stage 0 sent."""
    path, _ = recorded("pp_schedules", 2, "fake", ("--schedule", "1F1B", "--microbatches", str(M)))
    t = load(path)
    recv = [e for e in stream(t, 1, ("recv",)) if e["dtype"] == "float32"]
    assert {tuple(map(tuple, e["out_shapes"])) for e in recv} == {((2, 16),)}
    sizes = [e for e in stream(t, 1, ("recv",)) if e["dtype"] == "int64"]
    pickles = [e for e in stream(t, 1, ("recv",)) if e["dtype"] == "uint8"]
    sent = [e for e in stream(t, 0, ("send",)) if e["dtype"] == "uint8"]
    # the receiver's byte buffer is exactly as long as what the sender pickled (from the size)
    assert [e["out_shapes"] for e in pickles[:1]] == [e["in_shapes"] for e in sent[:1]]
    assert len(sizes) == len(pickles) == 1
