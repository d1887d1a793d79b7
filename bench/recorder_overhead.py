"""Recorder overhead: the same fake-PG run of examples/fsdp_tp.py, untraced vs recorded.

One rank (rank 0 of 4, fake mode) per measurement, each in a fresh process that runs the
program once to warm up (lazy imports, caches) and then once timed; recording includes writing
its part file. Alternating runs, median of each, one ratio. The baseline runs the same fake
collectives (which fill outputs with mirrored data) with nothing hooked or recorded; torch's own
fake backend is shown too, but it computes on uninitialized memory, whose NaNs and negatives
make CPU math slower or faster by chance (Adam's sqrt of negative garbage is ~6x slower):

    python bench/recorder_overhead.py [--repeats 5] [--steps 20] [--dim 512] [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "fsdp_tp.py")


def child(kind: str, world: int, args: list[str]) -> None:
    # both kinds import the same modules before the clock starts (recording processes are
    # forked from a server that has them loaded)
    import torch
    import torch.distributed as dist
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401

    import tracer.capture.patches  # noqa: F401
    from tracer.modes.run import torchrun_env
    from tracer.program import Program

    torch.set_flush_denormal(True)  # as the recorder does: garbage denormals would swamp the ratio
    os.environ.update(torchrun_env(0, world))
    program = Program(script=EXAMPLE, args=args)
    if kind in ("plain", "torchfake"):
        from tracer.capture import process_group as rpg

        orig = dist.init_process_group

        def init_process_group(*a, **k):
            if kind == "torchfake":  # torch's own fake backend: outputs hold uninitialized memory
                orig("fake", rank=0, world_size=world)
            else:  # the untraced baseline: the same fake collectives, nothing recorded or hooked
                rpg.register_backend()
                orig(rpg.BACKEND, store=dist.HashStore(), rank=0, world_size=world)

        dist.init_process_group = init_process_group

        def once():
            program.run()
            dist.destroy_process_group()
    else:
        from tracer.modes.run import Job, run_job

        def once():
            job = Job(program=program, mode="fake", world_size=world, ranks=[0], parts_dir=tempfile.mkdtemp())
            assert run_job(job) == 0

    once()  # warm-up: lazy imports and first-call caches, the same for both kinds
    start = time.process_time()  # CPU time: less noisy than wall time on a shared 2-core box
    once()
    print(f"{time.process_time() - start:.6f}")


def measure(kind: str, world: int, args: list[str]) -> float:
    # one intra-op thread: on a 2-core machine a second torch thread makes timings swing by 20 %
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--world", str(world), "--", *args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--child", choices=["plain", "traced", "torchfake"])
    ap.add_argument("rest", nargs="*")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.world, a.rest)
        return
    args = ["--steps", str(a.steps), "--dim", str(a.dim), "--batch", str(a.batch)]
    plain, traced, torchfake = [], [], []
    for _ in range(a.repeats):
        plain.append(measure("plain", a.world, args))
        traced.append(measure("traced", a.world, args))
        torchfake.append(measure("torchfake", a.world, args))
    p, t, f = statistics.median(plain), statistics.median(traced), statistics.median(torchfake)
    print(f"workload: examples/fsdp_tp.py {' '.join(args)}, rank 0 of {a.world}, fake mode")
    print(f"{'run':<10}{'median CPU s':>14}   runs")
    print(f"{'untraced':<10}{p:>14.3f}   {' '.join(f'{x:.3f}' for x in plain)}")
    print(f"{'recorded':<10}{t:>14.3f}   {' '.join(f'{x:.3f}' for x in traced)}")
    print(f"{'torch fake':<10}{f:>14.3f}   {' '.join(f'{x:.3f}' for x in torchfake)}")
    print(
        f"recorder overhead: {100 * (t / p - 1):+.1f} % vs the untraced run (goal <= 5 %); "
        f"{100 * (t / f - 1):+.1f} % vs torch's fake backend"
    )


if __name__ == "__main__":
    main()
