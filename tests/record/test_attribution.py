"""The recorded user frame is the innermost frame outside torch, commtrace and the standard
library, wherever it lives: a training library installed in site-packages included."""

import os
import shutil
import sysconfig

import pytest
import torch
import typing_extensions
from conftest import PROGRAMS, REPO, program, stream

from analyzer.loader import load
from tracer.capture.attribution import is_user_path


@pytest.mark.parametrize("mode", ["fake", "local"])
def test_frames_inside_an_installed_library(tmp_path, mode):
    from tracer.record.pipeline import record
    from tracer.record.program import Program
    from tracer.record.request import RecordRequest

    site = tmp_path / "lib" / "python3.11" / "site-packages"
    shutil.copytree(os.path.join(PROGRAMS, "installed_lib", "ddptrain"), site / "ddptrain")
    out = str(tmp_path / "lib.trace")
    res = record(
        RecordRequest(
            program=Program(script=program("launch_installed"), args=[str(site)]),
            world_size=2,
            out=out,
            mode=mode,
            progress=False,
        )
    )
    assert res.errors == {}
    t = load(out)
    for rank in range(2):
        frames = [(e["op"], e["frame"]) for e in stream(t, rank) if e["op"] != "wait"]
        ddp_init = [
            ("all_gather", "ddptrain/parallelize.py:6 in parallelize"),
            ("broadcast", "ddptrain/parallelize.py:6 in parallelize"),
            ("broadcast", "ddptrain/parallelize.py:6 in parallelize"),
        ]
        step = [
            ("all_reduce", "ddptrain/train.py:19 in main"),  # loss.backward(): DDP's bucket
            ("all_reduce", "ddptrain/train.py:9 in log_loss"),
        ]
        rebuild = [("broadcast", "ddptrain/train.py:18 in main")] * 2  # the forward of step 2
        assert frames == [("init_process_group", "ddptrain/train.py:13 in main"), *ddp_init, *step, *rebuild, *step]


def test_user_paths():
    torch_dir = os.path.dirname(torch.__file__)
    stdlib = sysconfig.get_paths()["stdlib"]
    assert not is_user_path(os.path.join(torch_dir, "nn", "parallel", "distributed.py"))
    assert not is_user_path(os.path.join(os.path.dirname(torch_dir), "functorch", "__init__.py"))
    assert not is_user_path(os.path.join(stdlib, "runpy.py"))
    assert not is_user_path(typing_extensions.__file__)  # torch's own calls go through its wrappers
    assert not is_user_path(os.path.join(REPO, "tracer", "capture", "process_group.py"))
    assert not is_user_path(os.path.join(REPO, "analyzer", "loader.py"))
    assert is_user_path(os.path.join(REPO, "tracer", "workloads", "train.py"))  # plays the user's program
    assert is_user_path(os.path.join(stdlib, "site-packages", "torchtitan", "train.py"))  # base interpreter's
    assert is_user_path(os.path.join(os.path.dirname(torch_dir), "torchtitan", "train.py"))
    assert is_user_path("/home/me/train.py")


# ---- the module that issued an op: its own forward hooks included --------------------------
def _record(tmp_path, name: str, mode: str, compute: str = "real"):
    from tracer.record.pipeline import record
    from tracer.record.program import Program
    from tracer.record.request import RecordRequest

    out = str(tmp_path / f"{name}-{mode}-{compute}.trace")
    res = record(
        RecordRequest(
            program=Program(script=program(name)), world_size=4, out=out, mode=mode, compute=compute, progress=False
        )
    )
    assert res.errors == {}, res.errors
    return load(out)


COMM = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "scatter", "broadcast")
MODES = [("fake", "real"), ("local", "real"), ("fake", "fake")]


def _comm(t, rank):
    return [(e["op"], e["module"] or "", e["phase"], e["out_shapes"]) for e in stream(t, rank, COMM)]


@pytest.mark.parametrize("mode,compute", MODES)
def test_rowwise_output_all_reduce_is_filed_under_its_module(tmp_path, mode, compute):
    # tp_mlp.py (net1 Colwise, net2 Rowwise): parallelize_module scatters net1's weight (16x8 ->
    # 4x8) and bias (16 -> 4) and net2's weight (8x16 -> 8x4) from rank 0, broadcasts net2's
    # replicated bias; the forward's one collective is the all-reduce of net2's partial (4, 8)
    # output, issued by RowwiseParallel's output hook on net2: CommDebugMode files it under net2
    t = _record(tmp_path, "tp_mlp", mode, compute)
    setup = [("scatter", "", "other", s) for s in ([[4, 8]], [[4]], [[8, 4]])] + [("broadcast", "", "other", [[8]])]
    for rank in range(4):
        assert _comm(t, rank) == [*setup, ("all_reduce", "net2", "forward", [[4, 8]])]


@pytest.mark.parametrize("mode,compute", MODES)
def test_every_tp_hook_files_its_collective_under_its_module(tmp_path, mode, compute):
    # tp_sequence.py on 4 ranks, x (2, 8, 8) sequence-sharded (2, 2, 8). Setup: block.net1
    # (16x8 -> 4x8), block.net2 (8x16 -> 8x4), head (16x8 -> 4x8) scattered; the norm's
    # replicated parameters are taken as they are (SequenceParallel: no collective).
    # Forward: block's PrepareModuleInput all-gathers the sequence (dim 1 through dim 0:
    # (8, 2, 8)) in block's pre-hook; the user's hook on block.net1 all-reduces a statistic;
    # block.net2's RowwiseParallel output hook reduce-scatters (8, 2, 8) -> (2, 2, 8); head's
    # ColwiseParallel input hook all-gathers again; the root's PrepareModuleOutput all-gathers
    # head's Shard(-1) output (2, 8, 4) -> (8, 8, 4) in the root's output hook (the root, in
    # forward: before, it was filed under no module, phase "other").
    # Backward, the module whose backward autograd entered last, its hooks' backward included:
    # head's input all-gather comes back as a reduce-scatter (head), net2's output
    # reduce-scatter as an all-gather (block.net2), block's input all-gather as a reduce-scatter
    # after net1's backward (block.net1).
    t = _record(tmp_path, "tp_sequence", mode, compute)
    seq, full = [[2, 2, 8]], [[8, 2, 8]]
    expected = [("scatter", "", "other", s) for s in ([[4, 8]], [[8, 4]], [[4, 8]])] + [
        ("all_gather_into_tensor", "block", "forward", full),
        ("all_reduce", "block.net1", "forward", [[1]]),
        ("reduce_scatter_tensor", "block.net2", "forward", seq),
        ("all_gather_into_tensor", "head", "forward", full),
        ("all_gather_into_tensor", "Model", "forward", [[8, 8, 4]]),
        ("reduce_scatter_tensor", "head", "backward", seq),
        ("all_gather_into_tensor", "block.net2", "backward", full),
        ("reduce_scatter_tensor", "block.net1", "backward", seq),
    ]
    for rank in range(4):
        assert _comm(t, rank) == expected
