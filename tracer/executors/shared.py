"""What the executors share: where a job's log and peak memory go, the helper jobs for ranks
that a recording rank waits on, and the progress bar."""

from __future__ import annotations

import dataclasses
import os
import sys

from tracer.modes.run import Job


def log_path(job: Job) -> str:
    """The job's stdout and stderr."""
    return os.path.join(job.parts_dir, f"job_{job.ranks[0]:05d}.log")


def peak_path(job: Job) -> str:
    """Where the job's process leaves its peak resident memory (bytes, one number)."""
    return os.path.join(job.parts_dir, f"job_{job.ranks[0]:05d}.peak")


def own_peak_bytes() -> int:
    """This process's peak resident memory: VmHWM on Linux (its own high-water mark; a child
    forked from the server counts the pages it shares with it), else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def read_peaks(jobs: list[Job]) -> dict[int, int]:
    """{first rank of the job: peak bytes of its process}, for the jobs that left one (files removed)."""
    peaks = {}
    for job in jobs:
        try:
            with open(peak_path(job)) as f:
                peaks[job.ranks[0]] = int(f.read())
            os.remove(peak_path(job))
        except (OSError, ValueError):
            continue
    return peaks


def helper_jobs(jobs: list[Job], blocked: dict[int, int], have: set[int], folder: str) -> list[Job]:
    """Helper jobs for the ranks that a recording rank waits on (channel.py: an object, or
    pipelining's shapes) and that no job records: a rank asked for alone (`--ranks 5` of a
    pipeline) would otherwise wait forever for its stage-0 peer. `blocked`: {rank: the rank it
    waits for}; `have`: the ranks some job records (updated); `folder`: the channel's (a rank
    that already ran, in an earlier round, is not run again: its waiter fails by itself,
    naming it, and its part stays as it was). A helper is the waiting rank's
    job for the awaited rank; it is recorded like a verification rank and left out of the
    trace. Fake mode only (one rank per job: local mode has no channel)."""
    by_rank = {j.ranks[0]: j for j in jobs if len(j.ranks) == 1 and j.mode == "fake"}
    out = []
    for rank, sender in sorted(blocked.items()):
        job = by_rank.get(rank)
        if job is None or sender in have or not 0 <= sender < job.world_size:
            continue
        if os.path.exists(os.path.join(folder, "done", str(sender))):
            continue
        have.add(sender)
        out.append(dataclasses.replace(job, ranks=[sender]))
    return out


def waiting_on_peers(jobs: list[Job], indices, blocked: dict[int, int]) -> set[int]:
    """Of the running jobs `indices`, those whose one rank waits for a peer in fake mode's channel
    (`blocked`: {rank: the rank it waits for}): each gives its core to the next job."""
    return {i for i in indices if len(jobs[i].ranks) == 1 and jobs[i].ranks[0] in blocked}


def awaited_first(queue: list[int], jobs: list[Job], blocked: dict[int, int]) -> None:
    """Put the queued jobs of the ranks someone waits for first: fewer ranks alive at once."""
    awaited = set(blocked.values())
    queue.sort(key=lambda i: jobs[i].ranks[0] not in awaited)


class Progress:
    """A rich progress bar on a terminal; silent otherwise."""

    def __init__(self, enabled: bool, total: int):
        self._p = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._p = Bar(
                TextColumn("recording"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("ranks"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._p.start()
            self._task = self._p.add_task("ranks", total=total)

    def advance(self, n: int) -> None:
        if self._p is not None:
            self._p.advance(self._task, n)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
            self._p = None


def last_line(log: str) -> str:
    """The last non-blank line of a job's log ('' when none): what a process that exited with
    a status of its own (os._exit) said last."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
