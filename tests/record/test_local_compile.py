"""torch.compile under local mode meeting a per-rank size (tests/programs/local_compile_rank_size.py):
one line that says so and names the way out, instead of dynamo's `InternalTorchDynamoError:
AttributeError: 'LocalIntNode' object has no attribute 'has_hint'`. TorchTitan FSDP 2 x CP 2 in
local mode stopped there (its BlockMask sharding is compiled)."""

from __future__ import annotations

import pytest
from conftest import program, run_tracer

pytestmark = pytest.mark.records


def test_compile_over_a_per_rank_size_is_one_line(tmp_path):
    p = run_tracer(
        "tracer", "record", "--script", program("local_compile_rank_size"), "-n", "2", "--mode", "local",
        "-o", "c.trace", cwd=tmp_path,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr  # the program's own failure, recorded up to it
    line = next(ln for ln in p.stderr.splitlines() if ln.startswith("error:"))
    assert "torch.compile met a size held per simulated rank" in line and "--mode fake" in line, line
    assert "local_compile_rank_size.py:" in line and "LocalIntNode" not in line, line
    # fake mode: each rank its own process and its own size, compiled as usual
    p = run_tracer(
        "tracer", "record", "--script", program("local_compile_rank_size"), "-n", "2", "-o", "f.trace", cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
