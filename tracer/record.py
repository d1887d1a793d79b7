"""Run the recording jobs across the cores and merge their parts into one .trace.

fake mode: one process per simulated rank, at most `jobs` at a time, forked from a server
that imported torch once. local mode: one process for all ranks. Each process streams its
ranks' events into `OUT.parts/rank_NNNNN.part` (one write per event), so a crash, a hang
or a SIGKILL keeps everything recorded so far; `merge` joins the parts afterwards.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

from tracer import parts as trace_parts
from tracer.modes.run import Job
from tracer.program import Program

# imported once by the fork server, not by every rank: DTensor, FSDP2 and pipelining take ~1 s
_PRELOAD = ["torch", "torch.distributed", "tracer.capture.patches", "tracer.modes.run", "torch.distributed.tensor",
            "torch.distributed.fsdp", "torch.distributed.pipelining", "tracer.workloads.train"]


@dataclass(kw_only=True, slots=True)
class RecordResult:
    out: str
    """Path of the merged trace."""
    ranks: list[int]
    """Ranks recorded."""
    n_events: dict[int, int] = field(default_factory=dict)
    """Events per rank."""
    errors: dict[int, str] = field(default_factory=dict)
    """One line per rank that did not finish cleanly."""
    seconds: float = 0.0
    """Wall time of the recording."""


def parse_ranks(spec: str, world_size: int) -> list[int]:
    """'all' or '0,3,8-15' -> sorted ranks; ValueError with a one-line message otherwise."""
    if spec.strip() in ("", "all"):
        return list(range(world_size))
    ranks: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                ranks.update(range(lo, hi + 1))
            else:
                ranks.add(int(part))
        except ValueError:
            raise ValueError(f"--ranks: cannot read {part!r} (use e.g. all or 0,3,8-15)") from None
    bad = sorted(r for r in ranks if not 0 <= r < world_size)
    if bad or not ranks:
        raise ValueError(f"--ranks: {bad or 'none'} outside 0..{world_size - 1}")
    return sorted(ranks)


def _child(job: Job, log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from tracer.modes.run import run_job

    code = run_job(job)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def record(program: Program, *, world_size: int, out: str, mode: str = "fake", ranks: list[int] | None = None,
           config: dict | None = None, timeout: float | None = None, jobs: int | None = None,
           progress: bool = True) -> RecordResult:
    program.check()
    if world_size < 1:
        raise ValueError(f"--world-size must be at least 1, got {world_size}")
    if mode not in ("fake", "local"):
        raise ValueError(f"--mode must be fake or local, got {mode!r}")
    ranks = list(range(world_size)) if ranks is None else ranks
    parts_dir = out + ".parts"
    shutil.rmtree(parts_dir, ignore_errors=True)
    os.makedirs(parts_dir)
    common = dict(program=program, mode=mode, world_size=world_size, parts_dir=parts_dir,
                  config=dict(config or {}, program=program.label, args=program.args, ranks=ranks),
                  root=os.getcwd())
    if mode == "fake":
        todo = [Job(ranks=[r], **common) for r in ranks]
    else:
        todo = [Job(ranks=ranks, **common)]
    start = time.perf_counter()
    exit_codes = _run_all(todo, jobs or os.cpu_count() or 1, timeout, progress, len(ranks))
    result = RecordResult(out=out, ranks=ranks)
    parts = [os.path.join(parts_dir, f"rank_{r:05d}.part") for r in ranks]
    present = [p for p in parts if os.path.exists(p)]
    summary = trace_parts.merge(present, out, {"world_size": world_size, "mode": mode}) if present else None
    for job, code in zip(todo, exit_codes):
        for r in job.ranks:
            end = summary.ends.get(r) if summary else None
            result.n_events[r] = end["n"] if end else 0
            if end and end["status"] == "ok":
                continue
            log = os.path.join(parts_dir, f"job_{job.ranks[0]:05d}.log")
            why = end["error"] if end and end["status"] == "error" else _exit_reason(code, timeout)
            result.errors[r] = f"rank {r}: {why} (log: {log})"
    result.seconds = time.perf_counter() - start
    for p in present:
        os.remove(p)
    if not result.errors:
        shutil.rmtree(parts_dir, ignore_errors=True)
    return result


def _exit_reason(code: int | None, timeout: float | None) -> str:
    if code == "timeout":
        return f"timed out after {timeout:g} s (killed; events up to then are kept)"
    if code is None:
        return "did not finish"
    if code < 0:
        return f"killed by signal {-code} (events up to then are kept)"
    return f"exited with status {code}"


def _run_all(todo: list[Job], n_workers: int, timeout: float | None, progress: bool, total: int) -> list:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    codes: list = [None] * len(todo)
    running: dict[int, tuple] = {}
    pending = list(range(len(todo)))
    bar = _Progress(progress, total)
    try:
        while pending or running:
            while pending and len(running) < n_workers:
                i = pending.pop(0)
                job = todo[i]
                log = os.path.join(job.parts_dir, f"job_{job.ranks[0]:05d}.log")
                proc = ctx.Process(target=_child, args=(job, log), daemon=True)
                proc.start()
                running[i] = (proc, time.monotonic())
            mp.connection.wait([proc.sentinel for proc, _ in running.values()], timeout=0.2)
            for i, (proc, started) in list(running.items()):
                if not proc.is_alive():
                    proc.join()
                    codes[i] = proc.exitcode
                    del running[i]
                    bar.advance(len(todo[i].ranks))
                elif timeout and time.monotonic() - started > timeout:
                    proc.kill()
                    proc.join()
                    codes[i] = "timeout"
                    del running[i]
                    bar.advance(len(todo[i].ranks))
    finally:
        for proc, _ in running.values():
            proc.kill()
            proc.join()
        bar.close()
    return codes


class _Progress:
    """A rich progress bar on a terminal; silent otherwise."""

    def __init__(self, enabled: bool, total: int):
        self._p = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(TextColumn("recording"), BarColumn(), MofNCompleteColumn(), TextColumn("ranks"),
                               TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._p.start()
            self._task = self._p.add_task("ranks", total=total)

    def advance(self, n: int) -> None:
        if self._p is not None:
            self._p.advance(self._task, n)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
