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
