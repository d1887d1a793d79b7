"""The frameworks people train with, recorded as their users run them (tests/programs/frameworks:
4 ranks, 2 steps, CPU, seeded). The truth is a real gloo run of the same program: `tracer record
--mode real` (one real gloo process per rank; checked once against Flight Recorder, see
docs/frameworks.md). For each healthy program the fake-mode trace holds, rank by rank, the
same (op, dtype, numel) sequence as the real one, `analyzer diff real fake` is clean, neither
has findings, and the per-rank op counts are the ones the real runs gave (pinned below, so a
framework upgrade that changes them is seen). Each seeded bug is found with its kind and
culprit, at the user's own line."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter

import polars as pl
import pytest
from conftest import BIN, PROGRAMS

from analyzer.checks import run_checks
from analyzer.compare.diff import diff_traces
from analyzer.loader import load

pytestmark = pytest.mark.frameworks

FRAMEWORKS = os.path.join(PROGRAMS, "frameworks")
TORCHTUNE_TORCHAO = os.path.join(os.path.dirname(BIN), "torchtune-torchao")
"""torchtune 0.6.1 imports torchao APIs that torchao 0.16 removed; the project's float8 extra
pins torchao 0.18. The Makefile installs torchao 0.11 here (--target), first on PYTHONPATH for
the torchtune programs only."""

# module each program needs, program, its arguments
HEALTHY = {
    "megatron_tp": ("megatron.core", "megatron_tp", ()),
    "megatron_tp_no_gloo": ("megatron.core", "megatron_tp", ("--no-gloo-groups",)),
    "deepspeed_zero1": ("deepspeed", "deepspeed_zero", ("--stage", "1")),
    "deepspeed_zero2": ("deepspeed", "deepspeed_zero", ("--stage", "2")),
    "deepspeed_zero3": ("deepspeed", "deepspeed_zero", ("--stage", "3")),
    "accelerate": ("accelerate", "accelerate_ddp", ()),
    "hf_trainer": ("transformers", "hf_trainer", ()),
    "fabric_ddp": ("lightning", "fabric_ddp", ()),
    "fabric_model_parallel": ("lightning", "fabric_model_parallel", ()),
    "torchtune": ("torchtune", "torchtune_full_finetune", ()),
}

_DEEPSPEED_Z12 = {
    "init_process_group": 1,
    "new_group": 1,
    "broadcast": 4,
    "all_reduce": 8,
    "all_gather_into_tensor": 2,
    "barrier": 1,
}
COUNTS = {
    "megatron_tp": {"init_process_group": 1, "new_group": 57, "all_reduce": 14},
    "megatron_tp_no_gloo": {"init_process_group": 1, "new_group": 57, "all_reduce": 14},
    "deepspeed_zero1": _DEEPSPEED_Z12,
    "deepspeed_zero2": _DEEPSPEED_Z12,
    "deepspeed_zero3": {
        "init_process_group": 1,
        "new_group": 1,
        "broadcast": 16,
        "barrier": 4,
        "all_gather_into_tensor": 16,
        "reduce_scatter_tensor": 6,
        "all_reduce": 2,
    },
    "accelerate": {},
    "hf_trainer": {"init_process_group": 1, "all_gather": 6, "broadcast": 2, "all_reduce": 4},
    "fabric_ddp": {"init_process_group": 1, "all_gather": 1, "broadcast": 4, "all_reduce": 4, "barrier": 3},
    "fabric_model_parallel": {
        "init_process_group": 1,
        "new_group": 4,
        "mesh": 7,
        "scatter": 3,
        "broadcast": 1,
        "all_gather_into_tensor": 2,
        "redistribute": 4,
        "all_reduce": 4,
        "reduce_scatter_tensor": 2,
        "barrier": 3,
    },
    "torchtune": {
        "init_process_group": 1,
        "mesh": 3,
        "all_gather_into_tensor": 12,
        "reduce_scatter_tensor": 6,
        "all_reduce": 4,
    },
}
"""Per-rank op counts of each healthy program's real gloo run (`--mode real`; every rank alike),
waits left out. DeepSpeed ZeRO-3's 44 collectives per rank equal a torchrun gloo run's Flight
Recorder dump too (docs/frameworks.md)."""

BUGS = {
    # a barrier only rank 0 enters (before a log line)
    "megatron_rank0_barrier": ("megatron_tp", "rank0-barrier", "missing_collective", [0], 58, True),
    # rank 3's model in bfloat16: DeepSpeed's parameter broadcast at initialize moves half the bytes
    "deepspeed_bf16_rank": ("deepspeed_zero1", "bf16-rank", "shape_mismatch", [3], 29, False),
    # the loss gathered for a log line on rank 0 only
    "deepspeed_rank0_gather": ("deepspeed_zero2", "rank0-gather", "missing_collective", [0], 39, True),
    "accelerate_rank0_gather": ("accelerate", "rank0-gather", "missing_collective", [0], 28, False),
    # a metric all-reduced in a TrainerCallback on the main process only
    "hf_trainer_rank0_metric": ("hf_trainer", "rank0-metric", "missing_collective", [0], 42, True),
    "fabric_rank0_barrier": ("fabric_ddp", "rank0-barrier", "missing_collective", [0], 30, False),
    # rank 3 reduces its logged loss in bfloat16
    "fabric_model_parallel_bf16_rank": ("fabric_model_parallel", "bf16-rank", "dtype_mismatch", [3], 50, False),
    # the loss reduced for the log on rank 0 only
    "torchtune_rank0_loss_reduce": ("torchtune", "rank0-loss-reduce", "missing_collective", [0], 44, True),
}
"""name: (the healthy case it seeds a bug into, its --bug, kind, culprits, the user's line, whether
the finding names that line yet: a call inside the framework is shown at the framework's line
until "the user's line first" (#38 item 3) lands)."""


def _env(program: str) -> dict:
    env = dict(os.environ, DS_ACCELERATOR="cpu", PYTHONWARNINGS="ignore")
    if program.startswith("torchtune"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (TORCHTUNE_TORCHAO, env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture(scope="session")
def fw_recorded(tmp_path_factory):
    """fw_recorded(program, args, mode) -> (path, completed process) of `tracer record` (cached)."""
    cache: dict = {}
    root = tmp_path_factory.mktemp("frameworks")

    def get(program: str, args: tuple, mode: str):
        key = (program, args, mode)
        if key not in cache:
            out = str(root / f"{program}-{'-'.join(a.strip('-') for a in args)}-{mode}.trace")
            cmd = [os.path.join(BIN, "tracer"), "record", "--script", os.path.join(FRAMEWORKS, program + ".py")]
            cmd += ["-n", "4", "--mode", mode, "--timeout", "300", "-o", out, "--", *args]
            p = subprocess.run(cmd, capture_output=True, text=True, env=_env(program), timeout=900)
            cache[key] = (out, p)
        return cache[key]

    return get


def _needs(module: str) -> None:
    if module == "torchtune":
        sys.path.insert(0, TORCHTUNE_TORCHAO)  # (as the programs get it: see TORCHTUNE_TORCHAO)
        try:
            pytest.importorskip("torchtune")
        finally:
            sys.path.remove(TORCHTUNE_TORCHAO)
    else:
        pytest.importorskip(module)


def _pattern(trace, rank: int) -> list[tuple]:
    ev = trace.events.filter((pl.col("rank") == rank) & (pl.col("op") != "wait")).sort("idx")
    out = []
    for row in ev.iter_rows(named=True):
        shapes = trace.atom(row["in_shapes"]) or []
        out.append((row["op"], row["dtype"], sum(math.prod(s) for s in shapes)))
    return out


@pytest.mark.parametrize("case", list(HEALTHY))
def test_fake_records_what_the_real_run_does(fw_recorded, case):
    module, program, args = HEALTHY[case]
    _needs(module)
    real_path, real_p = fw_recorded(program, args, "real")
    fake_path, fake_p = fw_recorded(program, args, "fake")
    assert real_p.returncode == 0, real_p.stderr[-2000:]
    assert fake_p.returncode == 0, fake_p.stderr[-2000:]
    real, fake = load(real_path), load(fake_path)
    assert run_checks(real).findings == [] and run_checks(fake).findings == []
    for r in range(4):
        assert _pattern(fake, r) == _pattern(real, r), r
        assert dict(Counter(op for op, _, _ in _pattern(real, r))) == COUNTS[case], r
    assert diff_traces(real, fake).equal


@pytest.mark.parametrize("bug", list(BUGS))
def test_seeded_bug_is_found_at_the_users_line(fw_recorded, bug):
    case, flag, kind, culprits, line, there = BUGS[bug]
    module, program, args = HEALTHY[case]
    _needs(module)
    path, p = fw_recorded(program, (*args, "--bug", flag), "fake")
    assert os.path.exists(path), p.stderr[-2000:]
    found = run_checks(load(path)).findings
    assert [(f.kind.name, f.culprit_ranks) for f in found][:1] == [(kind, culprits)], [f.message for f in found]
    where = f"{program}.py:{line}"
    if not there and where not in str(found[0].frames):
        pytest.xfail("user's line first (#38 item 3)")
    assert all(where in found[0].frames[r] for r in culprits), found[0].frames
