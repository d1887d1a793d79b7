"""The frameworks people train with, recorded as their users run them (tests/programs/frameworks:
4 ranks, 2 steps, CPU, seeded). The truth is a real gloo run of the same program (`tracer record
--mode real`, one real gloo process per rank; itself checked against a torchrun run's Flight
Recorder dump, docs/frameworks.md): each rank's (op, dtype, numel) sequence, kept in
truth/CASE.json (make_truth.py records it), and its per-rank op counts, pinned below. Every
healthy program's fake-mode trace holds that sequence on every rank and has no findings; two
cases are also recorded in real mode on every run (the same sequence, no findings, `analyzer
diff real fake` clean). Each seeded bug is found with its kind and culprit, at the user's own
line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from fw_cases import HEALTHY, HERE, TORCHTUNE_TORCHAO, env, pattern, tracer_command

from analyzer.checks import numerics_parity, run_checks
from analyzer.compare.diff import diff_traces
from analyzer.loader import load

pytestmark = pytest.mark.frameworks

TRUTH = os.path.join(HERE, "truth")
LIVE = ["megatron_tp", "deepspeed_zero3"]
"""Recorded in real mode on every test run too (the others' truth is kept: a real run is as long
as a fake one, and the whole group must stay within minutes)."""

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
    "megatron_tp_no_gloo": {"init_process_group": 1, "new_group": 51, "all_reduce": 14},  # 6 gloo groups fewer
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
    "accelerate": {"init_process_group": 1, "all_gather": 3, "broadcast": 4, "all_reduce": 2, "barrier": 1},
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
    "megatron_rank0_barrier": ("megatron_tp", "rank0-barrier", "missing_collective", [0], 58),
    # rank 3's model in bfloat16: DeepSpeed's parameter broadcast at initialize moves half the bytes
    "deepspeed_bf16_rank": ("deepspeed_zero1", "bf16-rank", "shape_mismatch", [3], 29),
    # the loss gathered for a log line on rank 0 only
    "deepspeed_rank0_gather": ("deepspeed_zero2", "rank0-gather", "missing_collective", [0], 39),
    "accelerate_rank0_gather": ("accelerate", "rank0-gather", "missing_collective", [0], 28),
    # a metric all-reduced in a TrainerCallback on the main process only
    "hf_trainer_rank0_metric": ("hf_trainer", "rank0-metric", "missing_collective", [0], 42),
    "fabric_rank0_barrier": ("fabric_ddp", "rank0-barrier", "missing_collective", [0], 30),
    # rank 3 reduces its logged loss in bfloat16
    "fabric_model_parallel_bf16_rank": ("fabric_model_parallel", "bf16-rank", "dtype_mismatch", [3], 50),
    # the loss reduced for the log on rank 0 only
    "torchtune_rank0_loss_reduce": ("torchtune", "rank0-loss-reduce", "missing_collective", [0], 44),
}
"""name: (the healthy case it seeds a bug into, its --bug, kind, culprits, the user's line: the
finding names it even where the call is made inside the framework, e.g. DeepSpeed's parameter
broadcast at initialize or Fabric's barrier)."""


@pytest.fixture(scope="session")
def fw_recorded(tmp_path_factory):
    """fw_recorded(program, args, mode, flags) -> (path, completed process) of `tracer record` (cached)."""
    cache: dict = {}
    root = tmp_path_factory.mktemp("frameworks")

    def get(program: str, args: tuple, mode: str, flags: tuple = ()):
        key = (program, args, mode, flags)
        if key not in cache:
            out = str(root / f"{program}-{'-'.join(a.strip('-') for a in (*args, *flags))}-{mode}.trace")
            cmd = tracer_command(program, args, mode, out, flags)
            p = subprocess.run(cmd, capture_output=True, text=True, env=env(program), timeout=900)
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


@pytest.mark.parametrize("case", list(HEALTHY))
def test_fake_records_what_the_real_run_does(fw_recorded, case):
    """Against the real run's sequence, kept in truth/CASE.json (make_truth.py recorded it)."""
    module, program, args = HEALTHY[case]
    _needs(module)
    path, p = fw_recorded(program, args, "fake")
    assert p.returncode == 0, p.stderr[-2000:]
    fake = load(path)
    assert run_checks(fake).findings == []
    with open(os.path.join(TRUTH, case + ".json")) as f:
        truth = json.load(f)
    for r in range(4):
        assert pattern(fake, r) == truth[str(r)], r
        assert dict(Counter(op for op, _, _ in truth[str(r)])) == COUNTS[case], r


@pytest.mark.parametrize("case", LIVE)
def test_real_run_now_is_the_truth_and_diffs_clean(fw_recorded, case):
    """A real gloo run made now, for the cases whose values matter most: it gives the kept truth,
    has no findings, and `analyzer diff real fake` is clean."""
    module, program, args = HEALTHY[case]
    _needs(module)
    real_path, real_p = fw_recorded(program, args, "real")
    assert real_p.returncode == 0, real_p.stderr[-2000:]
    real, fake = load(real_path), load(fw_recorded(program, args, "fake")[0])
    assert real.header["mode"] == "real" and run_checks(real).findings == []
    with open(os.path.join(TRUTH, case + ".json")) as f:
        truth = json.load(f)
    assert all(pattern(real, r) == truth[str(r)] for r in range(4))
    assert diff_traces(real, fake).equal


LOCAL = ["accelerate", "fabric_model_parallel"]
"""The SPMD ones: local mode (one Python, every rank) records them. The others are refused in one
line naming --mode real: Megatron's per-rank group bookkeeping (`if rank in ranks`), DeepSpeed's
shm op taking the rank in a C++ binding, HF Trainer's log level chosen by an if / else on the
local rank, Lightning's DistributedSampler picking each rank's samples in Python, torchtune's
`seed + rank` given to numpy's and Python's generators (one state each, not one per rank)."""


@pytest.mark.parametrize("case", LOCAL)
def test_spmd_ones_record_in_local_mode_with_the_real_runs_values(fw_recorded, case):
    module, program, args = HEALTHY[case]
    _needs(module)
    local_path, p = fw_recorded(program, args, "local", ("--numerics",))
    assert p.returncode == 0, p.stderr[-2000:]
    real_path, p = fw_recorded(program, args, "real", ("--numerics",))
    assert p.returncode == 0, p.stderr[-2000:]
    local = load(local_path)
    assert run_checks(local).findings == []
    with open(os.path.join(TRUTH, case + ".json")) as f:
        truth = json.load(f)
    assert all(pattern(local, r) == truth[str(r)] for r in range(4))
    # every module output, gradient and parameter of every step, against the real gloo run's
    assert numerics_parity.check(local, load(real_path)).findings == []


@pytest.mark.parametrize("case", [c for c in HEALTHY if c not in LOCAL])
def test_the_others_are_refused_in_local_mode_in_one_line_naming_real_mode(fw_recorded, case):
    module, program, args = HEALTHY[case]
    _needs(module)
    _, p = fw_recorded(program, args, "local")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    error = next(line for line in p.stderr.splitlines() if line.startswith("error:"))
    assert "depends on its rank" in error and "--mode real" in error


def _bug_findings(fw_recorded, bug: str) -> list:
    case, flag = BUGS[bug][:2]
    module, program, args = HEALTHY[case]
    _needs(module)
    path, p = fw_recorded(program, (*args, "--bug", flag), "fake")
    assert os.path.exists(path), p.stderr[-2000:]
    return run_checks(load(path)).findings


@pytest.mark.parametrize("bug", list(BUGS))
def test_seeded_bug_is_found(fw_recorded, bug):
    kind, culprits = BUGS[bug][2:4]
    found = _bug_findings(fw_recorded, bug)
    assert [(f.kind.name, f.culprit_ranks) for f in found][:1] == [(kind, culprits)], [f.message for f in found]


@pytest.mark.parametrize("bug", list(BUGS))
def test_seeded_bug_names_the_users_line(fw_recorded, bug):
    case, _, _, culprits, line = BUGS[bug]
    where = f"{HEALTHY[case][1]}.py:{line}"
    found = _bug_findings(fw_recorded, bug)
    assert found and all(where in found[0].frames.get(r, "") for r in culprits), found[0].frames if found else found
