"""Where the per-rank recording jobs run: an executor takes the jobs and returns one outcome each.

`local` (default): a pool of processes on this machine, forked from a server that imported
torch once (local.py). `ray`: Ray tasks on a Ray cluster (ray_cluster.py), each running its
job through the local machinery of the worker it lands on. Both write each rank's part into
the job's parts folder (shared storage for a cluster); the caller merges them. Neither
schedules anything itself beyond "at most `workers` at a time".

An outcome is an Outcome (outcome.py): finished, the program failed, needs real compute,
exited, killed, timed out or not started (with the executor's reason). What both executors
share (log and peak-memory files, helper jobs, the progress bar) is shared.py.
"""

from __future__ import annotations

from tracer.executors.outcome import Outcome
from tracer.executors.shared import Progress
from tracer.modes.run import Job

EXECUTORS = ("local", "ray")


def run(
    name: str,
    jobs: list[Job],
    *,
    workers: int,
    timeout: float | None,
    progress: bool,
    ray_address: str | None = None,
    helpers: list[int] | None = None,
) -> list[Outcome]:
    """Run `jobs` on executor `name`; one outcome per job, in order. `helpers` (fake mode): start
    the ranks the jobs wait on and nobody records (see helper_jobs), append their ranks to it, and
    stop them once every job finished."""
    bar = Progress(progress, sum(len(j.ranks) for j in jobs))
    try:
        if name == "local":
            from tracer.executors import local

            return local.run(jobs, workers=workers, timeout=timeout, bar=bar, helpers=helpers)
        if name == "ray":
            from tracer.executors import ray_cluster

            return ray_cluster.run(
                jobs, workers=workers, timeout=timeout, bar=bar, address=ray_address, helpers=helpers
            )
        raise ValueError(f"--executor must be one of {', '.join(EXECUTORS)}, got {name!r}")
    finally:
        bar.close()
