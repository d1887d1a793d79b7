"""#31: local mode computes what the real run computes, or says why not.

Each parity program runs for real on gloo (torchrun, world 4, CPU) and under
`tracer record --mode local -n 4`; both dump every rank's inputs, losses and gradients
(tests/programs/parity_dump.py: LocalTensor holds each simulated rank's value), which must agree.
A rank use local mode cannot carry is refused in one line, exit 2, naming the read and the use,
whatever the read (dist.get_rank(), a group's rank, a DeviceMesh's, $RANK, $LOCAL_RANK).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import BIN, REPO, program, stream

from analyzer.loader import load

PARITY = (
    "parity_generator",
    "parity_global_seed",
    "parity_rank_seed",
    "parity_rank0_print",
    "parity_rank_shape",
    "parity_framework_idioms",
)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Every parity program's per-rank values on a real gloo run (one torchrun for all)."""
    out = tmp_path_factory.mktemp("real")
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
        + [program("parity_all"), str(out), *PARITY],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def _values(folder) -> dict[str, dict]:
    return {name: json.load(open(os.path.join(folder, name))) for name in os.listdir(folder)}


def _local(name: str, tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    out = tmp_path / "local"
    out.mkdir()
    p = subprocess.run(
        [os.path.join(BIN, "tracer"), "record", "--script", program(name), "-n", "4", "--mode", "local"]
        + ["-o", str(tmp_path / f"{name}.trace"), "--", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PARITY_DIR": str(out)},
    )
    return p, _values(out)


def _same(a: dict, b: dict) -> bool:
    return a["shape"] == b["shape"] and all(
        abs(x - y) <= 1e-6 + 1e-5 * abs(x) for x, y in zip(a["values"], b["values"], strict=True)
    )


@pytest.mark.parametrize("name", PARITY)
def test_local_mode_computes_what_the_real_run_computes(real, name, tmp_path):
    p, got = _local(name, tmp_path)
    assert p.returncode == 0, p.stderr
    want = _values(real / name)
    assert sorted(got) == sorted(want) and len(want) >= 12
    differ = [key for key in sorted(want) if not _same(want[key], got[key])]
    assert differ == [], (
        differ[:4],
        [want[k]["values"][:4] for k in differ[:2]],
        [got[k]["values"][:4] for k in differ[:2]],
    )


def _across_ranks(values: dict[str, dict], name: str) -> list:
    return [values[f"{name}.{r}.json"]["values"] for r in range(4)]


def test_the_patterns_are_what_they_say(real):
    """The real runs themselves: an explicit generator and the global seed give every rank the
    same draw; a per-rank seed and a rank-sized batch give each rank its own."""
    gen, seed = _values(real / "parity_generator"), _values(real / "parity_global_seed")
    per_rank, shape = _values(real / "parity_rank_seed"), _values(real / "parity_rank_shape")
    assert all(v == _across_ranks(gen, "x")[0] for v in _across_ranks(gen, "x"))
    assert _across_ranks(gen, "again") == _across_ranks(gen, "x")
    assert _across_ranks(seed, "a") == _across_ranks(seed, "b") and _across_ranks(seed, "y") == _across_ranks(seed, "x")
    assert len({tuple(v) for v in _across_ranks(per_rank, "x")}) == 4
    assert [shape[f"x.{r}.json"]["shape"] for r in range(4)] == [[2, 4], [3, 4], [4, 4], [5, 4]]


ONE_RULE = "the program's behaviour depends on its rank ("
FAKE = "record it with --mode real (every rank's real values) or --mode fake (the comm pattern)"
USES = "tests/programs/rank_uses.py"


def _refusal(res) -> str:
    assert set(res.errors) == {0, 1, 2, 3}, res.errors
    return res.errors[0]


def test_a_refusal_is_one_line_and_exit_2(tmp_path):
    p, _ = _local("rank_uses", tmp_path, "get_rank", "collective")
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    line = [x for x in p.stderr.splitlines() if x.startswith("error:")][0]
    assert f"{ONE_RULE}dist.get_rank() at {USES}:18, branched on at {USES}:29;" in line and FAKE in line, line


@pytest.mark.parametrize(
    "read, label",
    [
        ("get_rank", "dist.get_rank()"),
        ("group_get_rank", "dist.get_rank()"),
        ("group_rank", "group.rank()"),
        ("mesh_rank", "DeviceMesh.get_rank()"),
        ("mesh_local_rank", "DeviceMesh.get_local_rank()"),
        ("env_rank", "$RANK"),
        ("env_local_rank", "$LOCAL_RANK"),
    ],
)
def test_every_rank_read_is_judged_by_one_rule(recorded, read, label):
    """A rank passed on into a function that issues a collective on rank 0 only: the same
    refusal whatever the read (before #31 a $RANK branch was judged apart from dist.get_rank()'s)."""
    line = _refusal(recorded("rank_uses", 4, "local", args=(read, "collective"))[1])
    assert f"{ONE_RULE}{label} at {USES}:" in line and FAKE in line, line
    assert f"branched on at {USES}:29; rank 0 alone issues all_reduce at {USES}:30)" in line, line


@pytest.mark.parametrize(
    "use, why",
    [
        ("tensor", f"used as one Python number at {USES}:40)"),
        ("index", f"used as one Python number at {USES}:42)"),
        ("object", f"sent as a Python object (pickled) at {USES}:45)"),
        ("else", f"branched on at {USES}:47; the ranks take different sides of an if/else)"),
        (
            "escape",
            f"branched on at {USES}:53; rank 0 alone sets `lr` at {USES}:54, read after the branch at {USES}:55)",
        ),
        ("write", f"branched on at {USES}:57; rank 0 alone writes a tensor (aten.mul_.Tensor) at {USES}:58)"),
        ("random", f"branched on at {USES}:60; rank 0 alone draws random numbers (aten.randn.default) at {USES}:61)"),
        ("while", f"branched on at {USES}:63; only the test of an `if` that rank 0 alone enters"),
        ("generator_seed", "passed where torch takes one Python int (manual_seed expected a long, but got RankInt)"),
        (
            "binding",
            f"passed to a C++ binding at {USES}:74 in <module> (`opts.rootRank = rank`); "
            "a binding takes one Python value per process)",
        ),
        (
            "returns",
            f"branched on at {USES}:81; rank 0 alone returns int where the other ranks return None ({USES}:83))",
        ),
    ],
)
def test_rank_uses_local_mode_cannot_carry_are_refused(recorded, use, why):
    line = _refusal(recorded("rank_uses", 4, "local", args=("get_rank", use))[1])
    assert f"{ONE_RULE}dist.get_rank() at {USES}:18, {why}" in line and FAKE in line, line


def test_a_rank_made_in_a_bindings_own_arguments_is_named_with_the_call(recorded):
    """DeepSpeed's `shm_comm_op.initialize(self.get_world_size(), self.get_rank())`: no name holds
    the rank, the call's own argument made it (a TypeError from pybind11 before #38)."""
    line = _refusal(recorded("rank_uses", 4, "local", args=("get_rank", "binding_call"))[1])
    call = '(lambda o: setattr(o, "rootRank", dist.get_rank()))(dist.ReduceOptions())'
    at = f"{USES}:76"
    assert f"{ONE_RULE}dist.get_rank() at {at}, passed to a C++ binding at {at} in <lambda> (`{call}`);" in line
    assert FAKE in line, line


def test_a_distributed_sampler_is_refused_not_given_rank_0s_samples(recorded):
    """DistributedSampler reads the rank inside torch.utils.data to pick each rank's samples:
    before #31 every simulated rank silently got rank 0's shard of the data."""
    line = _refusal(recorded("rank_uses", 4, "local", args=("get_rank", "sampler"))[1])
    assert f"{ONE_RULE}dist.get_rank() at " in line and "torch/utils/data/distributed.py:" in line, line
    assert f"used as one Python number at {USES}:70; a DistributedSampler picks each rank's samples in Python" in line
    assert FAKE in line, line


@pytest.mark.parametrize(
    "name, why",
    [
        (
            "log_branch",
            "(dist.get_rank() at tests/programs/log_branch.py:7, branched on at tests/programs/log_branch.py:11; "
            "rank 0 alone issues all_reduce at tests/programs/log_branch.py:12)",
        ),
        (
            "rank_branch",
            "(dist.get_rank() at tests/programs/rank_branch.py:8, branched on at tests/programs/rank_branch.py:8; "
            "rank 0 skips the body other ranks run (tests/programs/rank_branch.py:9))",
        ),
    ],
)
def test_a_rank_branch_that_communicates_is_refused(recorded, name, why):
    """Rank 0's logging all_reduce (log_branch) and rank 1's extra all_reduce (rank_branch): a
    real run diverges, local mode refuses instead of recording one side for all."""
    line = _refusal(recorded(name, 4, "local")[1])
    assert why in line and FAKE in line, line


def test_a_rank_read_in_a_value_is_carried(recorded):
    """item_branch: `torch.ones(4) * (dist.get_rank() + 1)` is each rank's own (1..4, summed 10:
    the branch on the reduced value is taken by every rank), recorded without refusal."""
    path, res = recorded("item_branch", 4, "local")
    assert res.errors == {}
    t = load(path)
    assert [[e["op"] for e in stream(t, r)].count("all_reduce") for r in range(4)] == [2, 2, 2, 2]
