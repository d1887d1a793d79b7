"""Run a command as a user would (a fresh process) and measure it: wall time and the peak RSS
of that process alone (os.wait4's rusage, not the maximum over every child so far)."""

from __future__ import annotations

import os
import subprocess
import sys
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
    code: int
    """Exit status."""
    stdout: str
    stderr: str


def run(*cmd: str, env: dict | None = None) -> Run:
    """`cmd[0]` is a console script of this venv (analyzer, tracer) or a path to an executable."""
    exe = os.path.join(BIN, cmd[0]) if os.path.exists(os.path.join(BIN, cmd[0])) else cmd[0]
    out_r, out_w = os.pipe()
    err_path = f"/tmp/commtrace-bench-{os.getpid()}.err"
    t0 = time.perf_counter()
    with open(err_path, "w+") as err:
        proc = subprocess.Popen([exe, *cmd[1:]], stdout=out_w, stderr=err, env=env)
        os.close(out_w)
        chunks = []
        with os.fdopen(out_r, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                chunks.append(chunk)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    os.remove(err_path)
    return Run(
        wall=wall,
        peak_gib=usage.ru_maxrss / 1024 / 1024,
        code=proc.returncode,
        stdout=b"".join(chunks).decode(),
        stderr=stderr,
    )
