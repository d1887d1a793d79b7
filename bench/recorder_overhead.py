"""Recorder overhead: the same fake-PG run of examples/fsdp_tp.py (rank 0 of 4), untraced vs
recorded, in two warm processes running in lock-step.

Why not one fresh process per run: one timed run per process varied by -24 % .. +74 % a pair.
Measured causes: (1) garbage: the model's tensors live in reference cycles (hooks), so each run's
memory went back at whichever later gen-2 collection happened to come, and glibc returned and
re-faulted it (0 .. 65,000 page faults, 0 .. 0.16 s of system time a run, either kind); here each
run ends with a collection inside its clock (each pays for its own garbage, the recorder's
included) over a heap frozen after warm-up; (2) the other core's load: CPU time itself grows by
up to 60 % while someone else's job thrashes the shared caches, and it changes within seconds, so
two runs a few seconds apart see different machines. Two processes now run one slot at a time,
side by side, one untraced and one recorded, swapping roles every slot: both runs of a pair see
the same seconds of the machine. Per-pair noise under load ~5 fell from 10 to 6 points.

Each process runs the program many times; a recorded run is `run_job` itself (recorder, every
patch installed and removed, attribution, part file written and closed, fake-mode channel), so
per-recording set-up costs are counted on every run. The untraced run is the same program with
the same fake collectives (commtrace's backend, which fills outputs with mirrored data) and
nothing hooked or recorded. Figure: the trimmed mean of the pairs' log ratios, with its 95 %
interval; more pairs until the interval is within +-`half_width` points.

Cross-check: timers around every recorder entry point (bench/recorder_timers.py) measure the
time the recorded run spends in recording code, over the rest of that same run; no second run,
so no noise from the machine. It cannot see torch's side of calling the hooks, so it is a lower
bound that should sit just under the A/B figure.

    python bench/recorder_overhead.py [--half-width 0.8] [--max-pairs 400] [--against torchfake]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "fsdp_tp.py")
ARGS = ["--steps", "20", "--dim", "512", "--batch", "64"]
WORLD = 4


# ---- the worker: one warm process, runs what it is told, one timed run per command ---------------
def worker(out_fd: int) -> None:
    import gc
    import importlib
    import shutil
    import tempfile

    import recorder_timers
    import torch
    import torch.distributed as dist

    from tracer.capture import process_group as rpg
    from tracer.executors.local import _PRELOAD

    for name in _PRELOAD[1:]:  # what a recording process has loaded: it forks from this server
        importlib.import_module(name)
    from tracer.modes.run import Job, run_job, torchrun_env
    from tracer.program import Program

    torch.set_flush_denormal(True)  # as run_job does: garbage denormals would swamp the ratio
    os.environ.update(torchrun_env(0, WORLD))
    program = Program(script=EXAMPLE, args=ARGS)
    orig_init = dist.init_process_group

    def untraced(backend: str) -> None:
        def init_process_group(*a, **k):
            if backend == "fake":  # torch's own: outputs hold uninitialized memory
                orig_init("fake", store=dist.HashStore(), rank=0, world_size=WORLD)
            else:  # the same fake collectives as a recording, nothing hooked or recorded
                rpg.register_backend()
                orig_init(rpg.BACKEND, store=dist.HashStore(), rank=0, world_size=WORLD)

        assert rpg.RecordingProcessGroup.recorder is None
        dist.init_process_group = init_process_group
        try:
            program.run()
        finally:
            dist.destroy_process_group()
            dist.init_process_group = orig_init

    parts = [""]  # made before each run's clock starts, removed after it stops (as `tracer record` does)

    def recorded() -> None:
        job = Job(program=program, mode="fake", world_size=WORLD, ranks=[0], parts_dir=parts[0])
        assert run_job(job) == 0

    def timed_inside() -> None:  # the cross-check: the timers' own cost stays out of the A/B runs
        recorder_timers.install()
        try:
            recorded()
        finally:
            recorder_timers.uninstall()

    kinds = {
        "plain": lambda: untraced("commtrace"),
        "torchfake": lambda: untraced("fake"),
        "traced": recorded,
        "traced_timers": timed_inside,
    }

    def run(kind: str) -> dict:
        parts[0] = tempfile.mkdtemp(prefix="commtrace-overhead-")
        own0 = recorder_timers.seconds()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        kinds[kind]()
        gc.collect()  # each run pays for collecting its own garbage
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        shutil.rmtree(parts[0], ignore_errors=True)
        return {"cpu": cpu, "wall": wall, "own": recorder_timers.seconds() - own0}

    for kind in kinds:  # warm-up: lazy imports and first-call caches, the same for both
        run(kind)
    gc.collect()
    gc.freeze()  # what is alive now is not the runs' garbage: collections below skip it
    with os.fdopen(out_fd, "w") as out:
        out.write("ready\n")
        out.flush()
        for line in sys.stdin:
            out.write(json.dumps(run(line.strip())) + "\n")
            out.flush()


class Worker:
    def __init__(self):
        r, w = os.pipe()
        # one intra-op thread: on a 2-core machine a second torch thread makes timings swing by 20 %
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(w)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            pass_fds=(w,),
            env=env,
            text=True,
        )
        os.close(w)
        self.out = os.fdopen(r)
        if self.out.readline().strip() != "ready":
            raise RuntimeError(f"overhead worker failed (exit {self.proc.wait()})")

    def start(self, kind: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(kind + "\n")
        self.proc.stdin.flush()

    def result(self) -> dict:
        line = self.out.readline()
        if not line:
            raise RuntimeError(f"overhead worker died (exit {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()
        self.out.close()


# ---- the measure ---------------------------------------------------------------------------------
@dataclass(kw_only=True, slots=True)
class Overhead:
    pairs: list[float] = field(default_factory=list)
    """Per pair: 100 * log(recorded CPU s / untraced CPU s), the two runs side by side."""
    own: list[float] = field(default_factory=list)
    """Per recorded run with the timers (after the pairs): % of its time in recorder code, over
    the rest of that run."""
    base_cpu: list[float] = field(default_factory=list)
    """Untraced CPU seconds per run."""
    traced_cpu: list[float] = field(default_factory=list)
    """Recorded CPU seconds per run."""

    def estimate(self) -> tuple[float, float, float]:
        """(overhead %, 95 % interval low, high) from the 10 %-trimmed mean of the log ratios."""
        m, se = trimmed_mean(self.pairs)
        pct = lambda x: 100 * math.expm1(x / 100)  # noqa: E731
        return pct(m), pct(m - 1.96 * se), pct(m + 1.96 * se)

    def own_pct(self) -> float:
        return statistics.median(self.own)


def trimmed_mean(xs: list[float], cut: float = 0.1) -> tuple[float, float]:
    """Trimmed mean and its standard error (winsorized variance, Tukey-McLaughlin)."""
    v = sorted(xs)
    n = len(v)
    g = int(cut * n)
    kept = v[g : n - g]
    wins = [kept[0]] * g + kept + [kept[-1]] * g
    if n < 3:
        return statistics.mean(v), math.inf
    return statistics.mean(kept), statistics.stdev(wins) / ((1 - 2 * g / n) * math.sqrt(n))


def measure(
    *,
    half_width: float = 0.8,
    min_pairs: int = 30,
    max_pairs: int = 400,
    max_seconds: float = 900.0,
    against: str = "plain",
    own_runs: int = 5,
    progress=None,
) -> Overhead:
    """Pairs until the 95 % interval is within +-half_width points (or a cap is reached)."""
    workers = [Worker(), Worker()]
    res = Overhead()
    t0 = time.perf_counter()
    try:
        while True:
            slot = len(res.pairs)
            kinds = (against, "traced") if slot % 2 == 0 else ("traced", against)  # roles swap
            for w, kind in zip(workers, kinds):
                w.start(kind)
            runs = dict(zip(kinds, (w.result() for w in workers)))
            base, rec = runs[against], runs["traced"]
            res.pairs.append(100 * math.log(rec["cpu"] / base["cpu"]))
            res.base_cpu.append(base["cpu"])
            res.traced_cpu.append(rec["cpu"])
            n = len(res.pairs)
            if n >= min_pairs:
                est, lo, hi = res.estimate()
                if progress is not None and n % 10 == 0:
                    progress(f"    {n} pairs: {est:+.2f} % ({lo:+.2f} .. {hi:+.2f})")
                if hi - lo <= 2 * half_width or n >= max_pairs or time.perf_counter() - t0 > max_seconds:
                    break
        for _ in range(own_runs):  # the cross-check, both workers at once
            for w in workers:
                w.start("traced_timers")
            for w in workers:
                run = w.result()
                res.own.append(100 * run["own"] / (run["wall"] - run["own"]))
        return res
    finally:
        for w in workers:
            w.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--half-width", type=float, default=0.8, help="stop when the 95 %% interval is within +-this")
    ap.add_argument("--min-pairs", type=int, default=30)
    ap.add_argument("--max-pairs", type=int, default=400)
    ap.add_argument("--against", choices=["plain", "torchfake"], default="plain")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        sys.path[:0] = [HERE, os.path.dirname(HERE)]
        worker(a.worker)
        return
    r = measure(
        half_width=a.half_width, min_pairs=a.min_pairs, max_pairs=a.max_pairs, against=a.against, progress=print
    )
    est, lo, hi = r.estimate()
    base = "the untraced run" if a.against == "plain" else "torch's fake backend"
    print(f"workload: examples/fsdp_tp.py {' '.join(ARGS)}, rank 0 of {WORLD}, fake mode; {len(r.pairs)} pairs")
    print(
        f"untraced CPU s: median {statistics.median(r.base_cpu):.3f}; recorded: {statistics.median(r.traced_cpu):.3f}"
    )
    print(f"recorder overhead vs {base}: {est:+.2f} % (95 % interval {lo:+.2f} .. {hi:+.2f})")
    print(f"in recorder code (timers, same run): {r.own_pct():.2f} %")


if __name__ == "__main__":
    main()
