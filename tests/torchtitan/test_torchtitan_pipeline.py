"""TorchTitan 0.3 itself, recorded again through the adapter and compared with its goldens
(analyzer.compare.golden.compare: the `analyzer golden check` comparison), for what the adapter had to
make work on a CPU: pipeline parallel (torch 2.13's schedules taking TorchTitan's microbatch
lists, the stage handshake over the object channel) and TorchTitan's own
`--comm.mode local_tensor` in local mode (one LocalTensorMode, TorchTitan's set-up rank reads).
Counts are pinned on the goldens, torch-free (test_torchtitan_goldens.py); here the recordings
must equal them. Skipped, with the reason, where TorchTitan is not installed."""

from __future__ import annotations

import os

import pytest
from conftest import REPO
from test_torchtitan_adapter import SMALL, _record, needs_torchtitan

from analyzer.checks import run_checks
from analyzer.compare.golden import compare
from analyzer.loader import load

pytestmark = [needs_torchtitan, pytest.mark.torchtitan, pytest.mark.slow]


def _golden(name: str) -> str:
    return os.path.join(REPO, "traces", f"torchtitan_llama3_{name}.trace")


def _record_same_as_golden(work, name: str, args: list[str]):
    out = str(work / f"{name}.trace")
    result = _record(["--torchtitan", "llama3:llama3_debugmodel", "-n", "8", "-o", out, *args])
    assert result.exit_code == 0, result.output
    trace = load(out)
    assert run_checks(trace).findings == []
    same = compare(out, _golden(name))
    assert same.status == "same", same.diff
    return trace


def test_interleaved_1f1b_records_as_its_golden(tmp_path):
    """FSDP 2 x TP 2 x PP 2, Interleaved1F1B (2 virtual stages per rank), 8 ranks, fake mode."""
    pp = [
        "--parallelism.data_parallel_shard_degree",
        "2",
        "--parallelism.tensor_parallel_degree",
        "2",
        "--parallelism.pipeline_parallel_degree",
        "2",
        "--parallelism.pipeline_parallel_schedule",
        "Interleaved1F1B",
    ]
    trace = _record_same_as_golden(tmp_path, "fsdp_tp_pp_interleaved", ["--", *SMALL, *pp])
    assert trace.header["mode"] == "fake"


def test_torchtitans_own_local_tensor_mode_records_as_fake_mode(tmp_path):
    """FSDP 4 x TP 2 with TorchTitan's `--comm.mode local_tensor` (so --mode local): the same
    comm pattern as the fake-mode golden, rank by rank."""
    tp = ["--parallelism.data_parallel_shard_degree", "4", "--parallelism.tensor_parallel_degree", "2"]
    args = ["--mode", "local", "--", *SMALL, *tp, "--comm.mode", "local_tensor"]
    trace = _record_same_as_golden(tmp_path, "fsdp_tp", args)
    assert trace.header["mode"] == "local"
