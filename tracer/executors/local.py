"""The local executor: at most `workers` jobs at a time, each in its own process forked from a
server that imported torch and the recording machinery once.

A fresh process per rank is what keeps ranks independent (torch.distributed, DeviceMesh and
the patches are process-global); forking it from a warm server makes it cost about as much
as the rank's own work: the server pays the imports (~2 s) once per `tracer record`, or once
per Ray worker (ray_cluster.py runs its tasks through here).
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import time

from traceformat.workers import context
from tracer.executors.outcome import Outcome
from tracer.executors.shared import (
    Progress,
    awaited_first,
    helper_jobs,
    log_path,
    own_peak_bytes,
    peak_path,
    waiting_on_peers,
)
from tracer.executors.stacks import stack_of_log
from tracer.fake.channel import blocked_ranks, channel_dir, gone
from tracer.modes.run import Job

# imported once by the fork server, not by every rank: DTensor, FSDP2 and pipelining take
# ~1 s; __main__ (e.g. the tracer CLI script) so that children do not re-run it either
_PRELOAD = [
    "__main__",
    "torch",
    "torch.distributed",
    "tracer.capture.patches",
    "tracer.modes.run",
    "torch.distributed.tensor",
    "torch.distributed.fsdp",
    "torch.distributed.pipelining",
    "torch._dynamo",
    "torch._subclasses.fake_tensor",
    "tracer.fake.compute",
    "tracer.workloads.train",
    "tracer.capture.preloaded",  # last: indexes what the modules above hold, for every rank
]


def _child(job: Job, log: str) -> None:
    import faulthandler

    from tracer.capture import watchdog

    watchdog.TERMINAL[0] = os.dup(2)  # where `tracer record` prints: a rank blocked says so there
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    # a signal death (a segfault in a C++ extension, an abort) leaves every thread's Python
    # stack in the log; run_job writes the traceback of an exception there; STACK_SIGNAL (sent
    # before a timed-out rank is killed) writes where every thread is stuck
    faulthandler.enable(all_threads=True)
    faulthandler.register(STACK_SIGNAL, all_threads=True)
    from tracer.modes.run import run_job

    code = run_job(job)
    try:  # the caller cannot see it: this process is the fork server's child, not its own
        with open(peak_path(job), "w") as f:
            f.write(str(own_peak_bytes()))
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


STACK_SIGNAL = signal.SIGUSR1
"""Asks a rank process for every thread's Python stack (faulthandler, into its log)."""


def _stacks_then_kill(procs: list) -> None:
    """Timed-out ranks: each one's stack into its log first (where it waits: the op, the line),
    then SIGKILL. faulthandler writes from its signal handler in C, whatever the rank is blocked
    in. All are signalled before any is killed: a rank of a real job whose peer dies first
    stops with that peer's error instead of where it was stuck."""
    for proc in procs:
        try:
            os.kill(proc.pid, STACK_SIGNAL)
        except OSError:
            pass
    if procs:
        time.sleep(0.5)
    for proc in procs:  # every kill before any join: a rank killed late would see its peer gone
        proc.kill()
    for proc in procs:
        proc.join()


def run(
    jobs: list[Job],
    *,
    workers: int,
    timeout: float | None,
    bar: Progress | None = None,
    helpers: list[int] | None = None,
) -> list[Outcome]:
    """Run every job in its own process, `workers` at a time; an outcome per job.
    `helpers`: start awaited ranks nobody records (shared.helper_jobs), append their ranks to it,
    kill them once every job finished."""
    ctx = context(_PRELOAD)
    asked = len(jobs)
    jobs = list(jobs)
    codes: list[Outcome | None] = [None] * len(jobs)
    running: dict[int, tuple] = {}
    pending = list(range(len(jobs)))
    folder = channel_dir(jobs[0].parts_dir) if jobs else ""
    have = {r for job in jobs for r in job.ranks}
    last = time.monotonic()
    try:
        while pending or running:
            # a rank waiting for a peer's object (channel.py) gives its core to the next rank
            # (the peer it waits on may not have started yet), and its waiting time does not
            # count towards --timeout: it times out itself, naming whom it waits for
            blocked = blocked_ranks(folder) if pending or timeout or helpers is not None else {}
            if helpers is not None:
                if all(code is not None for code in codes[:asked]):
                    break  # the helpers still running are of no use to anyone now (killed below)
                for job in helper_jobs(jobs, blocked, have, folder):
                    jobs.append(job)
                    codes.append(None)
                    pending.insert(0, len(jobs) - 1)
                    helpers.append(job.ranks[0])
            waiting = waiting_on_peers(jobs, running, blocked)
            if waiting and pending:
                awaited_first(pending, jobs, blocked)
            now = time.monotonic()
            for i in waiting:
                running[i] = (running[i][0], running[i][1] + now - last)
            last = now
            while pending and len(running) - len(waiting) < workers:
                i = pending.pop(0)
                proc = ctx.Process(target=_child, args=(jobs[i], log_path(jobs[i])), daemon=True)
                proc.start()
                running[i] = (proc, time.monotonic())
            mp.connection.wait([proc.sentinel for proc, _ in running.values()], timeout=0.2)
            late = [
                i
                for i, (proc, started) in running.items()
                if timeout and proc.is_alive() and time.monotonic() - started > timeout and i not in waiting
            ]
            _stacks_then_kill([running[i][0] for i in late])  # together: none outlives a peer killed first
            for i, (proc, _started) in list(running.items()):
                if i in late:
                    stack, at = stack_of_log(log_path(jobs[i]), jobs[i].root or os.getcwd())
                    codes[i] = Outcome.timed_out(tuple(stack), at)
                elif not proc.is_alive():
                    proc.join()
                    codes[i] = Outcome.of_exit(proc.exitcode)
                else:
                    continue
                gone(folder, jobs[i].ranks)
                del running[i]
                if bar is not None and i < asked:
                    bar.advance(len(jobs[i].ranks))
    finally:
        for proc, _ in running.values():
            proc.kill()
            proc.join()
    return [code or Outcome.of_exit(None) for code in codes[:asked]]
