"""Interrupted recordings keep what was recorded and say where; a recording without torch says
how to install it before any rank starts."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import BIN, REPO, program

from analyzer.loader import load
from traceformat.reader import read_trace


def _wait_for_events(parts_dir, ranks, n, limit=120.0):
    """Until each rank's part holds n events (hang.py: init + 3 all_reduces, then sleeps)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            counts = [len(read_trace(os.path.join(parts_dir, f"rank_{r:05d}.part")).columns[r]["op"]) for r in ranks]
            if all(c >= n for c in counts):
                return
        except Exception:  # not there yet, or mid-write
            pass
        time.sleep(0.3)
    raise AssertionError(f"parts in {parts_dir} never reached {n} events")


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_kills_ranks_keeps_parts_and_says_where(tmp_path, sig, code):
    old = tmp_path / "keep.trace"
    old.write_bytes(open(os.path.join(REPO, "traces", "fsdp.trace"), "rb").read())
    os.utime(old, (time.time() - 60, time.time() - 60))
    before = old.read_bytes()
    proc = subprocess.Popen(
        [os.path.join(BIN, "tracer"), "record", "--script", program("hang"), "-n", "2", "-o", "keep.trace", "-j", "2"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_events(tmp_path / "keep.trace.parts", [0, 1], 4)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    name = signal.Signals(sig).name
    assert lines[0] == (
        f"interrupted ({name}): ranks stopped; kept what 2 of 2 rank(s) recorded "
        f"({_size(tmp_path / 'keep.trace.parts'):,} bytes) in keep.trace.parts/ (keep.trace left "
        "as it was); join them with: tracer merge keep.trace.parts -o keep.trace"
    )
    assert old.read_bytes() == before
    # the rank processes are gone: their parts stop growing
    size = _size(tmp_path / "keep.trace.parts")
    time.sleep(1.0)
    assert _size(tmp_path / "keep.trace.parts") == size
    t = load(old)
    assert any("keep.trace.parts/ holds parts newer than" in n for n in t.notes), t.notes
    kept = load(tmp_path / "keep.trace.parts")
    assert [kept.stream.filter(kept.stream["rank"] == r).height for r in (0, 1)] == [4, 4]


def _size(folder) -> int:
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".part"))


def test_loader_is_quiet_when_the_parts_are_older(tmp_path, recorded):
    path, _ = recorded("collectives", 2)
    out = tmp_path / "x.trace"
    out.write_bytes(open(path, "rb").read())
    (tmp_path / "x.trace.parts").mkdir()
    (tmp_path / "x.trace.parts" / "rank_00000.part").write_bytes(b"")
    os.utime(tmp_path / "x.trace.parts" / "rank_00000.part", (time.time() - 60, time.time() - 60))
    assert not any("newer" in n for n in load(out).notes)


def test_record_without_torch_says_how_to_install_it(tmp_path):
    hide = (
        "import sys; sys.modules['torch'] = None; from tracer.cli import main; "
        f"sys.argv = ['tracer', 'record', '--script', {program('rank_branch')!r}, '-n', '2', '-o', 'x.trace']; "
        "main()"
    )
    p = subprocess.run([sys.executable, "-c", hide], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"error: tracer record needs torch, which {sys.executable} cannot import: pip install torch==2.13.0 "
        "(pin it: an unpinned torch can pull a multi-GB CUDA build)"
    ]
    assert os.listdir(tmp_path) == []  # no rank started, no parts folder
