"""`tracer replay`: recorded patterns played back on real gloo; a recorded cycle really hangs."""

import os
import subprocess
import sys

import pytest
from conftest import REPO

from analyzer.hang import analyze
from analyzer.loader import load
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader
from traceformat.ops import COMM_OPS, GROUP_OPS
from tracer.replay.driver import ReplayError, plan, replay


def _alive(pid: int) -> bool:
    """A process that still runs (a zombie awaiting its reaper does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _marked(out: str) -> list[int]:
    """Live processes whose environment names this replay's output (every replay rank's does)."""
    mark = f"COMMTRACE_REPLAY={os.path.abspath(out)}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read().split(b"\0") and _alive(int(pid)):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracer.cli", "replay", *args], capture_output=True, text=True, cwd=REPO, timeout=180
    )


@pytest.mark.parametrize("name,world", [("collectives", 4), ("p2p", 4), ("dtensor", 4), ("tp", 4), ("groups", 8)])
def test_healthy_recording_replays_on_gloo(recorded, tmp_path, name, world):
    path, _ = recorded(name, world, "fake")
    out = str(tmp_path / "replay.trace")
    res = replay(path, out=out, timeout=60)
    assert not res.hung and res.errors == {}
    assert not any(_alive(p) for p in res.pids)
    t = load(out)
    assert t.header["mode"] == "replay"
    report = analyze(t)
    assert not report.hung and report.findings == []
    # the replay issues what was recorded: same comm ops per rank, in order
    src = load(path)
    comm = sorted(COMM_OPS)
    for r in range(world):
        ops = [
            x.events.filter((x.events["rank"] == r) & x.events["op"].cast(str).is_in(comm))["op"].cast(str).to_list()
            for x in (src, t)
        ]
        assert ops[0] == ops[1]
    assert sum(s["calls"] for s in res.stats) > 0


def test_cli_prints_the_bandwidth_table(recorded, tmp_path):
    path, _ = recorded("p2p", 4, "fake")
    proc = _cli(path, "--backend", "gloo", "-o", str(tmp_path / "r.trace"))
    assert proc.returncode == 0, proc.stderr
    assert "algbw" in proc.stdout and "send" in proc.stdout and "recv" in proc.stdout


def test_recorded_cycle_hangs_on_gloo_and_the_replay_names_it(recorded, tmp_path):
    path, _ = recorded("deadlock_ab", 2, "fake")
    out = str(tmp_path / "hang.trace")
    proc = _cli(path, "--backend", "gloo", "--timeout", "10", "-o", out)
    assert proc.returncode == 1, proc.stderr
    assert "deadlock_cycle" in proc.stdout and "hung" in proc.stderr
    assert _marked(out) == []  # every replay rank is gone with the command
    report = analyze(load(out))
    assert report.semantics == "post-mortem"
    assert [(f.kind.name, f.ranks) for f in report.findings] == [("deadlock_cycle", [0, 1])]


@pytest.fixture
def partial(recorded, tmp_path):
    """The p2p ring's trace with rank 3's stream gone."""
    data = trace_reader.read_trace(recorded("p2p", 4, "fake")[0])
    del data.columns[3], data.ends[3]
    data.header = dict(data.header, ranks=[0, 1, 2])
    path = str(tmp_path / "partial.trace")
    trace_parts.write_data(path, data)
    return path


def test_partial_trace_is_refused_in_one_line(partial, tmp_path):
    with pytest.raises(ReplayError, match="ranks 3 missing"):
        plan(trace_reader.read_trace(partial))
    proc = _cli(partial, "-o", str(tmp_path / "r.trace"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--prefix" in proc.stderr


def test_prefix_replays_what_every_partner_reached(partial, tmp_path):
    p = plan(trace_reader.read_trace(partial), prefix=True)
    assert [ev["op"] for ev in p.events[3]] == ["init_process_group"]  # borrowed group creation only
    assert all(ev["peer"] != 3 for evs in p.events.values() for ev in evs if ev["op"] in ("send", "recv"))
    res = replay(partial, out=str(tmp_path / "r.trace"), timeout=30, prefix=True)
    assert not res.hung and res.errors == {}


def test_steps_keeps_only_early_events(recorded):
    data = trace_reader.read_trace(recorded("tp", 4, "fake")[0])
    full, one = plan(data), plan(data, steps=1)
    assert 0 < len(one.events[0]) < len(full.events[0])
    assert all(ev["step"] < 1 for ev in one.events[0] if ev["op"] not in GROUP_OPS)
