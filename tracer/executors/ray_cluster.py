"""The Ray executor (`tracer record --executor ray`): one Ray task per job.

The cluster: `--ray-address`, else the RAY_ADDRESS environment variable, else a local Ray
cluster started here with `workers` CPUs and shut down afterwards. Each task asks for one CPU
and runs its job through the local executor of the worker it lands on: in a process forked
from that worker's fork server (so torch is imported once per worker, not once per rank, and
every rank still gets a fresh process), killed after `timeout` seconds.

Parts and logs are written to the job's parts folder from wherever the task runs, and the
driver merges them after the last task: on a real cluster the folder (and the program, and the
working directory the driver ran in) must be on a filesystem every node shares, and commtrace
and torch must be installed on every node. Ray does the scheduling, retries nothing (a failed
rank is reported, as with the local executor), and the driver only waits.
"""

from __future__ import annotations

import os
from typing import Any

from tracer.executors.outcome import Outcome
from tracer.executors.shared import Progress, awaited_first, helper_jobs, waiting_on_peers
from tracer.fake.channel import blocked_ranks, channel_dir, gone
from tracer.modes.run import Job


def _task(job: Job, timeout: float | None) -> Outcome:
    """Runs on a Ray worker: one job, through the worker's own fork server."""
    from tracer.executors import local

    if job.root and os.path.isdir(job.root):
        os.chdir(job.root)  # relative script and parts paths are the driver's; the child inherits it
    return local.run([job], workers=1, timeout=timeout)[0]


def run(
    jobs: list[Job],
    *,
    workers: int,
    timeout: float | None,
    bar: Progress | None = None,
    address: str | None = None,
    helpers: list[int] | None = None,
) -> list[Outcome]:
    try:
        import ray
    except ImportError:
        raise ValueError("--executor ray needs Ray: pip install 'commtrace[cluster]' (or ray>=2.9)") from None
    address = address or os.environ.get("RAY_ADDRESS") or None
    started = not ray.is_initialized()
    if started and address is not None:
        _check_reachable(address)
    if started:
        opts: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        if address is None:
            opts["num_cpus"] = workers  # a local cluster of this machine's cores
        try:
            ray.init(address=address, **opts)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ValueError(f"--executor ray: cannot reach the Ray cluster at {address}: {_one_line(e)}") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_task)
        cpus = int(ray.cluster_resources().get("CPU", 0)) or workers
        limit = max(cpus, workers)  # real mode asks every rank at once (workers = world size)
        refs: dict = {}  # submitted, unfinished: {ref: job index}
        holding: set = set()  # those of them that asked Ray for a CPU
        queue = list(range(len(jobs)))  # not submitted yet
        outcomes: list[Outcome] = [Outcome.of_exit(None)] * len(jobs)
        folder = channel_dir(jobs[0].parts_dir) if jobs else ""
        have = {r for job in jobs for r in job.ranks}
        extra: list = []  # helper tasks (shared.helper_jobs): cancelled once every job finished
        everyone = list(jobs)  # a helper may wait on a rank nobody runs either
        while queue or refs:
            blocked = blocked_ranks(folder)
            if helpers is not None:
                for job in helper_jobs(everyone, blocked, have, folder):
                    everyone.append(job)
                    # no CPU asked: the ranks waiting on it hold theirs (they only poll), and a
                    # chain of stages longer than the cluster's CPUs would otherwise never start
                    extra.append(remote.options(num_cpus=0).remote(job, timeout))
                    helpers.append(job.ranks[0])
            # as the local pool does: a rank waiting for a peer (fake mode's channel) gives its
            # CPU to the next job, the awaited ranks first; Ray still counts that CPU as held, so
            # a job beyond the cluster's CPUs asks none (all submitted at once asking one each,
            # ranks 0-1 of 4 on 2 CPUs waited for ever on rank 2, queued behind them)
            waiting = len(waiting_on_peers(jobs, refs.values(), blocked))
            if waiting and queue:
                awaited_first(queue, jobs, blocked)
            while queue and len(refs) - waiting < limit:
                i = queue.pop(0)
                cpu = len(holding) < cpus
                ref = remote.options(num_cpus=int(cpu)).remote(jobs[i], timeout)
                refs[ref] = i
                if cpu:
                    holding.add(ref)
            # whatever finished within the half second, not one by one: 100k refs stay cheap
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0.5, fetch_local=False)
            for ref in done:
                i = refs.pop(ref)
                holding.discard(ref)
                try:
                    outcomes[i] = ray.get(ref)
                except Exception as e:  # the worker died, the node went away, ...: this rank's failure
                    outcomes[i] = Outcome.not_started(f"ray task failed: {type(e).__name__}: {_one_line(e)}")
                    gone(folder, jobs[i].ranks)
                if bar is not None:
                    bar.advance(len(jobs[i].ranks))
        for ref in extra:
            ray.cancel(ref, force=True)
        return outcomes
    finally:
        if started:
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """Fail in seconds, not after Ray's minutes of connection retries, on a wrong host:port."""
    import socket

    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise ValueError(
            f"--executor ray: cannot reach the Ray cluster at {address}: {e.strerror or type(e).__name__}"
        ) from None


def _one_line(e: BaseException) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return lines[0] if lines else type(e).__name__
