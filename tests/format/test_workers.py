"""One way to start worker processes: affinity-aware CPU counts, fork-server pools."""

import os

from traceformat.workers import chunksize, context, cpu_count, pool


def test_cpu_count_is_the_affinity_set():
    assert cpu_count() == len(os.sched_getaffinity(0))


def test_pool_runs_in_fork_server_children():
    assert context().get_start_method() == "forkserver"
    with pool(2) as p:
        pids = set(p.map(_pid, range(8), chunksize=chunksize(8, 2)))
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert (chunksize(8, 2), chunksize(100, 4), chunksize(1, 8)) == (1, 6, 1)


def _pid(_: int) -> int:
    return os.getpid()
