"""`tracer record ... --reference 1`: the layout and the single-process run in one command, both
traces kept (OUT and OUT.ref.trace), the comparison printed, its exit code the command's. The
programs are the corpus's (tests/programs/numerics/grad_factor.py: dp x tp = 2 x 2, gradients
averaged over dp but divided by the world size; its real gloo figures are in
test_numerics_corpus.py's docstring)."""

from __future__ import annotations

import os

import pytest
from conftest import PROGRAMS, one_line_error, run_tracer

pytestmark = pytest.mark.records

GRAD_FACTOR = os.path.join(PROGRAMS, "numerics", "grad_factor.py")


def _record(tmp_path, *args):
    out = str(tmp_path / "layout.trace")
    proc = run_tracer("tracer", "record", "--script", GRAD_FACTOR, "-n", "4", "-o", out, *args)
    return proc, out


def test_buggy_layout_against_its_single_process_run_in_real_mode(tmp_path):
    proc, out = _record(tmp_path, "--mode", "real", "--reference", "1", "--", "buggy")
    assert proc.returncode == 1, proc.stderr
    assert os.path.isfile(out) and os.path.isfile(str(tmp_path / "layout.ref.trace"))
    assert "numerics_divergence · emb.weight · step 0 backward" in proc.stdout
    assert "recorded 31 events on 1 ranks" in proc.stderr  # the reference: world 1, every rank


def test_healthy_layout_matches_in_local_mode(tmp_path):
    proc, _ = _record(tmp_path, "--mode", "local", "--reference", "1", "--", "healthy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no findings" in proc.stdout


@pytest.mark.parametrize(
    "args, said",
    [
        (["--reference", "1"], "--reference compares real values: add --mode real"),
        (["--mode", "real", "--reference", "0"], "--reference must be a world size of at least 1"),
    ],
)
def test_reference_refusals_are_one_line(tmp_path, args, said):
    proc, out = _record(tmp_path, *args)
    assert proc.returncode == 2 and said in one_line_error(proc)
    assert not os.path.exists(out)  # refused before anything ran
