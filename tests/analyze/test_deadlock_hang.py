"""Deadlock-prone orderings (`analyzer check`) and hang post-mortems (`analyzer hang`)."""

import os
import subprocess

import pytest
from conftest import BIN

from analyzer.checks import run_checks
from analyzer.checks.options import CheckOptions
from analyzer.checks.ordering import check as ordering_check
from analyzer.hang import analyze
from analyzer.loader import load

CYCLES = [
    ("deadlock_mesh", 4, [0, 1, 3, 2]),  # 0 waits 1 (tp), 1 waits 3 (dp), 3 waits 2 (tp), 2 waits 0 (dp)
    ("deadlock_ab", 2, [0, 1]),  # two groups over the same ranks entered A,B vs B,A
    ("deadlock_send_send", 2, [0, 1]),  # both do a blocking send first
]


@pytest.mark.parametrize("name,world,cycle", CYCLES, ids=[c[0] for c in CYCLES])
def test_exactly_one_deadlock_cycle_naming_its_ranks(recorded, name, world, cycle):
    path, _ = recorded(name, world, "fake")
    found = run_checks(load(path)).findings
    assert [(f.kind.name, f.culprit_ranks) for f in found] == [("deadlock_cycle", sorted(cycle))], [
        f.message for f in found
    ]
    f = found[0]
    assert f.cycle == cycle  # in wait order, starting from the lowest rank
    assert f.message.startswith(f"deadlock: {len(cycle)} ranks wait on each other")
    assert all(f"{name}.py" in fr for fr in f.frames.values())


def test_mesh_cycle_goes_through_all_four_groups(recorded):
    (f,) = ordering_check(load(recorded("deadlock_mesh", 4, "fake")[0]), CheckOptions()).findings
    assert sorted(g["label"] for g in f.groups) == ["dp", "dp", "tp", "tp"]
    assert "waiting for rank 1" in f.message and "waiting for rank 0" in f.message


def test_eager_small_sends_are_not_a_deadlock(recorded):
    path = recorded("deadlock_send_send", 2, "fake")[0]
    t = load(path)
    assert ordering_check(t, CheckOptions(eager_bytes=4096)).findings == []  # 1024 floats = 4 KiB: eager
    assert len(ordering_check(t, CheckOptions(eager_bytes=1024)).findings) == 1
    # the CLI passes the same option: `check` agrees with `hang`
    check = [os.path.join(BIN, "analyzer"), "check", path]
    assert subprocess.run([*check, "--eager-bytes", "4096"], capture_output=True).returncode == 0
    p = subprocess.run([*check, "--eager-bytes", "1024"], capture_output=True, text=True)
    assert p.returncode == 1 and "deadlock_cycle" in p.stdout


@pytest.mark.parametrize("name,world", [("p2p", 4), ("fsdp", 4), ("tp", 4), ("groups", 8), ("collectives", 4)])
def test_healthy_traces_have_no_cycle_and_no_hang(recorded, name, world):
    t = load(recorded(name, world, "fake")[0])
    assert ordering_check(t, CheckOptions()).findings == []
    report = analyze(t)
    assert not report.hung and report.findings == []


@pytest.fixture(scope="module")
def stopped(recorded):
    """64 ranks on an 8 x 8 (dp, tp) mesh; rank 17 dies before step 1's dp all-gather."""
    broken, res = recorded("stop_early", 64, "fake", args=("--stop", "17"))
    golden, _ = recorded("stop_early", 64, "fake")
    assert set(res.errors) == {17}
    return load(broken), load(golden)


def test_hang_names_the_rank_that_stopped_and_what_it_should_run_next(stopped):
    broken, golden = stopped
    report = analyze(broken, golden)
    assert broken.truncated and report.semantics == "replayed"
    assert sorted(report.stuck) == [r for r in range(64) if r != 17]
    (root,) = report.findings
    assert root.kind.name == "stalled_rank" and root.culprit_ranks == [17]
    assert root.waiting_ranks == [r for r in range(64) if r != 17]  # all wait on it, transitively
    assert root.group["label"] == "dp" and root.group["ranks"] == list(range(1, 64, 8)) and root.seq == 1
    assert "rank 17 never entered all_gather_into_tensor #1 on dp (ranks 1-57 step 8)" in root.message
    nxt = root.expected_next
    assert (nxt["op"], nxt["group"], nxt["seq"]) == ("all_gather_into_tensor", "dp", 1)
    assert nxt["frame"].endswith("stop_early.py:19 in <module>")


def test_hang_cli_dot_and_json(stopped, recorded, tmp_path):
    broken, _ = recorded("stop_early", 64, "fake", args=("--stop", "17"))
    golden, _ = recorded("stop_early", 64, "fake")
    dot = tmp_path / "wait.dot"
    p = subprocess.run(
        [os.path.join(BIN, "analyzer"), "hang", broken, "--expected", golden, "--dot", str(dot), "--json"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1, p.stderr
    import json

    out = json.loads(p.stdout)
    assert [f["kind"] for f in out["findings"]] == ["stalled_rank"] and out["findings"][0]["culprit_ranks"] == [17]
    assert len(out["stuck_ranks"]) == 63 and [1, 17] in out["wait_for"]
    text = dot.read_text()
    assert text.startswith("digraph waitfor") and "r1 -> r17;" in text and "r17 [" in text
    p = subprocess.run([os.path.join(BIN, "analyzer"), "hang", golden], capture_output=True, text=True)
    assert p.returncode == 0 and "no hang" in p.stdout


def test_hang_on_a_dry_run_deadlock_reports_the_cycle(recorded):
    report = analyze(load(recorded("deadlock_mesh", 4, "fake")[0]))
    assert [f.kind.name for f in report.findings] == ["deadlock_cycle"] and sorted(report.stuck) == [0, 1, 2, 3]
