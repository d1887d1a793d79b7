"""Bad input gets one line and exit 2; what was recorded survives failures, timeouts, SIGKILL."""

import os
import re
import signal
import subprocess
import time

import pytest
from conftest import BIN, one_line_error, program, stream
from conftest import run_tracer as run

from analyzer.loader import LoadError, load


def test_missing_script(tmp_path):
    p = run("tracer", "record", "--script", str(tmp_path / "nope.py"), "-n", "4", cwd=tmp_path)
    assert p.returncode == 2 and "script not found" in one_line_error(p)


@pytest.mark.parametrize(
    "args,msg",
    [
        (["-n", "0"], "--world-size must be at least 1"),
        (["-n", "4", "--ranks", "2-9"], "outside 0..3"),
        (["-n", "4", "--ranks", "x"], "--ranks"),
        (["-n", "4", "--mode", "mpi"], "--mode"),
        (["-n", "-3"], "--world-size must be at least 1"),
        (["-n", "2", "-j", "-1"], "--jobs must be at least 1"),
        (["-n", "2", "-j", "0"], "--jobs must be at least 1"),
        (["-n", "2", "--timeout", "-5"], "--timeout must be a positive number"),
        (["-n", "2", "--timeout", "0"], "--timeout must be a positive number"),
        (["-n", "2", "--timeout", "nan"], "--timeout must be a positive number"),
    ],
)
def test_bad_options(tmp_path, args, msg):
    p = run("tracer", "record", "--script", program("rank_branch"), *args, cwd=tmp_path)
    assert p.returncode == 2 and msg in one_line_error(p)
    assert os.listdir(tmp_path) == []  # refused before any process started or parts folder was made


@pytest.mark.parametrize(
    "args,msg",
    [
        (["-j", "-1"], "--jobs must be at least 1"),
        (["--timeout", "-5"], "--timeout must be a positive number"),
        (["--ranks", "0,9"], "outside 0..3"),
        (["-n", "0"], "--world-size must be at least 1"),
    ],
)
def test_bad_options_with_a_config(tmp_path, args, msg):
    from conftest import REPO

    p = run("tracer", "record", os.path.join(REPO, "examples", "fsdp.toml"), *args, cwd=tmp_path)
    assert p.returncode == 2 and msg in one_line_error(p)
    assert os.listdir(tmp_path) == []


def test_wrong_world_size_names_rank_and_cause(tmp_path):
    p = run("tracer", "record", "--script", program("wrong_world"), "-n", "4", "-o", "w.trace", cwd=tmp_path)
    assert p.returncode == 2
    line = one_line_error(p)
    assert "ranks 0-3:" in line and "world_size=8" in line and "simulates 4 ranks" in line  # one line for all


def test_rank_that_raises_keeps_everyones_events(tmp_path):
    p = run("tracer", "record", "--script", program("raises"), "-n", "4", "-o", "r.trace", cwd=tmp_path)
    assert p.returncode == 2
    line = one_line_error(p)
    assert "rank 2" in line and "ValueError: bad batch on rank 2" in line and "raises.py:8" in line
    t = load(tmp_path / "r.trace")
    assert t.status[2]["status"] == "error" and t.status[0]["status"] == "ok"
    assert [e["op"] for e in stream(t, 2)] == ["init_process_group", "all_reduce"]
    assert [e["op"] for e in stream(t, 3)] == ["init_process_group", "all_reduce", "all_reduce"]
    assert any("rank 2: error" in n for n in t.notes)
    log = open(tmp_path / log_named(line)).read()  # the rank's full traceback
    assert "Traceback (most recent call last)" in log and 'raises.py", line 8, in <module>' in log
    assert log.rstrip().endswith("ValueError: bad batch on rank 2")


def test_signal_death_leaves_the_python_stack_in_the_log(tmp_path):
    p = run("tracer", "record", "--script", program("segfault"), "-n", "2", "-o", "s.trace", cwd=tmp_path)
    assert p.returncode == 2
    line = one_line_error(p)
    assert "rank 1: killed by signal 11" in line
    log = open(tmp_path / log_named(line)).read()  # faulthandler's dump, innermost frame first
    assert "Fatal Python error: Segmentation fault" in log
    assert log.index('segfault.py", line 9 in crash') < log.index('segfault.py", line 15 in <module>')
    t = load(tmp_path / "s.trace")
    assert [e["op"] for e in stream(t, 1)] == ["init_process_group", "all_reduce"]
    assert [e["op"] for e in stream(t, 0)] == ["init_process_group", "all_reduce", "all_reduce"]


def log_named(line: str) -> str:
    m = re.search(r"\(log: ([^)]+)\)$", line)
    assert m, line
    return m.group(1)


def test_timeout_kills_a_hung_rank_and_keeps_its_events(tmp_path):
    p = run("tracer", "record", "--script", program("hang"), "-n", "2", "-o", "h.trace", "--timeout", "5", cwd=tmp_path)
    assert p.returncode == 2 and "timed out after 5 s" in one_line_error(p)
    t = load(tmp_path / "h.trace")
    assert t.truncated
    for rank in (0, 1):
        assert [e["op"] for e in stream(t, rank)] == ["init_process_group"] + ["all_reduce"] * 3


def test_sigkill_leaves_a_loadable_recording(tmp_path):
    proc = subprocess.Popen(
        [os.path.join(BIN, "tracer"), "record", "--script", program("hang"), "-n", "2", "-o", "k.trace"],
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    parts = tmp_path / "k.trace.parts"
    deadline = time.time() + 60
    try:
        while time.time() < deadline:
            try:
                t = load(parts)
                if all(len(stream(t, r)) == 4 for r in (0, 1)):
                    break
            except LoadError:
                pass
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (tmp_path / "k.trace").exists()
    t = load(tmp_path / "k.trace")  # falls back to the parts folder
    assert t.truncated and any("never written" in n for n in t.notes)
    assert t.status[0]["status"] == "truncated"
    for rank in (0, 1):
        assert [e["op"] for e in stream(t, rank)] == ["init_process_group"] + ["all_reduce"] * 3
    # the parts can also be merged into a trace by hand
    m = run("tracer", "merge", str(parts), "-o", str(tmp_path / "merged.trace"))
    assert m.returncode == 0
    assert load(tmp_path / "merged.trace").events.height == 8


def test_truncated_trace_loads_with_a_note(recorded, tmp_path):
    path, _ = recorded("collectives", 4, "fake")
    data = open(path, "rb").read()
    cut = tmp_path / "cut.trace"
    cut.write_bytes(data[: len(data) * 2 // 3])
    t = load(cut)
    assert t.truncated and any("truncated at byte" in n for n in t.notes)
    assert 0 < t.events.height < load(path).events.height
