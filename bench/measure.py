"""Run a command as a user would (a fresh process) and measure it: wall time, the peak RSS of
that process alone (os.wait4's rusage, not the maximum over every child so far), and the peak
of its whole process tree's RSS summed (its worker processes included: sampled from /proc)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

BIN = os.path.dirname(sys.executable)
REPO_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")


@dataclass(kw_only=True, slots=True)
class Run:
    wall: float
    """Seconds, start-up included."""
    peak_gib: float
    """Peak resident memory of the process, GiB."""
    tree_gib: float = 0.0
    """Peak of the resident memory summed over the process and its descendants (sampled every
    0.2 s; 0 where /proc is not there), GiB."""
    code: int
    """Exit status."""
    stdout: str
    stderr: str


def _tree_rss(pid: int) -> int:
    """Bytes resident in `pid` and its descendants now (/proc children lists)."""
    total, todo, page = 0, [pid], os.sysconf("SC_PAGE_SIZE")
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * page
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def _sample(pid: int, done: threading.Event, peak: list) -> None:
    while not done.wait(0.2):
        peak[0] = max(peak[0], _tree_rss(pid))


def run(*cmd: str, env: dict | None = None) -> Run:
    """`cmd[0]` is a console script of this venv (analyzer, tracer) or a path to an executable."""
    exe = os.path.join(BIN, cmd[0]) if os.path.exists(os.path.join(BIN, cmd[0])) else cmd[0]
    out_r, out_w = os.pipe()
    err_path = f"/tmp/commtrace-bench-{os.getpid()}.err"
    t0 = time.perf_counter()
    with open(err_path, "w+") as err:
        proc = subprocess.Popen([exe, *cmd[1:]], stdout=out_w, stderr=err, env=env)
        os.close(out_w)
        done, peak = threading.Event(), [0]
        sampler = threading.Thread(target=_sample, args=(proc.pid, done, peak), daemon=True)
        sampler.start()
        chunks = []
        with os.fdopen(out_r, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                chunks.append(chunk)
        done.set()  # the pipe is closed: the tree is ending (its last sample was taken alive)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    os.remove(err_path)
    return Run(
        wall=wall,
        peak_gib=usage.ru_maxrss / 1024 / 1024,
        tree_gib=max(peak[0] / 2**30, usage.ru_maxrss / 1024 / 1024),
        code=proc.returncode,
        stdout=b"".join(chunks).decode(),
        stderr=stderr,
    )


def fits(r: Run, seconds: float, gib: float = 12.0) -> bool:
    """The command succeeded (exit 0 or 1: findings) within its time and memory targets."""
    return r.code in (0, 1) and r.wall <= seconds and r.peak_gib <= gib


def json_out(r: Run) -> dict:
    """The command's --json output (empty when it printed none or not JSON)."""
    try:
        return json.loads(r.stdout) if r.stdout else {}
    except ValueError:
        return {}


def roots(r: Run) -> str:
    """The first two findings' kinds and culprits of `analyzer hang --json`, and the stuck ranks."""
    if not r.stdout:
        return f"error: {r.stderr.strip()[-100:]}"
    out = json.loads(r.stdout)
    return (
        "roots: "
        + "; ".join(f"{f['kind']} {f['culprit_ranks']}" for f in out["findings"][:2])
        + f"; {len(out['stuck_ranks'])} stuck ranks"
    )


def trace_events(path: str) -> int:
    """Events in a trace (loaded by the analyzer)."""
    from analyzer.loader import load

    return load(path).n_events
