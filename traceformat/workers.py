"""Worker processes and CPU counts, one way for every pool in commtrace (decoding parts, reading
Flight Recorder dumps, recording ranks).

- CPUs are the ones this process may run on (`os.sched_getaffinity`): under SLURM or taskset a
  job gets a slice of the node, and `os.cpu_count()` (the whole node) would oversubscribe it.
- Processes start from a fork server, never by a plain fork: the analyzer holds polars' thread
  pool (and the recorder torch's), and a fork taken while another thread holds a lock leaves
  that lock held forever in the child (a deadlock). The server forks from a clean,
  single-threaded process that imports `preload` once.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor


def cpu_count() -> int:
    """CPUs this process may run on (at least 1)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def context(preload: list[str] | tuple[str, ...] = ()) -> mp.context.ForkServerContext:
    """A fork-server context whose server imports `preload` once (modules every child needs)."""
    ctx: mp.context.ForkServerContext = mp.get_context("forkserver")
    if preload:
        ctx.set_forkserver_preload(list(preload))
    return ctx


def pool(workers: int, preload: list[str] | tuple[str, ...] = ()) -> ProcessPoolExecutor:
    """A process pool of `workers` fork-server children."""
    return ProcessPoolExecutor(workers, mp_context=context(preload))


def chunksize(n_items: int, workers: int) -> int:
    """Items per task for `pool.map`: about four tasks per worker (balance vs. overhead)."""
    return max(1, n_items // (4 * workers))
