"""Recording at scale: every rank of a 256-rank FSDP x TP x PP job, on this machine.

    python bench/record_scale.py [--config bench/configs/fsdp_tp_pp_256.toml] [--sample 0,1,...]
                                 [--executor local|ray] [--skip-full] [--skip-cost]

1. `tracer record CONFIG` of all ranks with the default executor and compute (auto: real for
   this small model), as a user runs it: wall time against the 3-minute goal, events, ranks/s,
   CPU time and peak RSS of the rank processes, and the load of the (shared) machine.
2. The same comm pattern either way: sampled ranks (every pipeline stage, first and last tp
   and dp positions) recorded again with the other compute (`--ranks ... --compute fake`),
   compared with the full recording event by event, every column but the timestamp.
3. Per-rank cost, each a fresh process with the imports done first (as a forked rank has
   them), CPU seconds of one rank: untraced (the anchor: the same run, same fake process group,
   nothing hooked or recorded), recorded with real compute, recorded with fake compute; and the
   same two at TorchTitan's debug model sizes (bench/configs/llama_debug_8.toml), where real
   math costs.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCALE = os.path.join(HERE, "configs", "fsdp_tp_pp_256.toml")
DEBUG = os.path.join(HERE, "configs", "llama_debug_8.toml")
BIN = os.path.dirname(sys.executable)
TARGET_S = 180.0
TARGET_GIB = 24.0
COMPARE_SKIP = {"ts"}


def load_avg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def tracer(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    """Run `tracer ARGS`: (process, wall s). Rank processes are children of the fork server,
    which is never waited for, so their CPU and memory are measured per rank (section 3)."""
    t0 = time.perf_counter()
    p = subprocess.run([os.path.join(BIN, "tracer"), *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"tracer {' '.join(args)} failed:\n{p.stderr}")
    return p, wall


def streams(path: str, ranks: list[int]) -> dict[int, list[tuple]]:
    """Each rank's events as comparable tuples: atoms decoded, groups as member lists."""
    import polars as pl

    from analyzer.loader import load

    t = load(path)
    members = {r["gid"]: tuple(r["ranks"]) for r in t.groups.iter_rows(named=True)}
    cols = [c for c in t.events.columns if c not in COMPARE_SKIP]
    out = {}
    for rank in ranks:
        rows = t.events.filter(pl.col("rank") == rank).sort("idx").select(cols).iter_rows(named=True)
        out[rank] = [
            tuple(
                (
                    k,
                    members.get(v)
                    if k == "group"
                    else t.atom(v)
                    if k in ("in_shapes", "out_shapes", "splits", "info")
                    else v,
                )
                for k, v in r.items()
            )
            for r in rows
        ]
    return out


def sample_ranks(cfg) -> list[int]:
    """Every pipeline stage's first and last rank, and one in the middle of the data-parallel dim."""
    world, pp = cfg.world_size, cfg.parallelism.pipeline_parallel_degree
    per_stage = world // pp
    picks = {s * per_stage + k for s in range(pp) for k in (0, per_stage - 1)}
    picks.add(per_stage // 2 + 1)
    return sorted(picks)


def full_and_sample(args, cfg, tmp: str) -> None:
    from tracer.record.compute import resolve

    used = resolve(cfg.tracer.compute, "fake", cfg)[0]
    other = "fake" if used == "real" else "real"
    out = os.path.join(tmp, "full.trace")
    print(f"load average before: {load_avg()} (2 cores shared with other work: timings are noisy)")
    p, wall = tracer("record", args.config, "-o", out, "--executor", args.executor)
    m = re.search(r"recorded (\d+) events on (\d+) ranks", p.stderr)
    events, n = int(m.group(1)), int(m.group(2))
    ok = "meets" if wall <= TARGET_S else "MISSES"
    print(
        f"goal 1, record all ranks: {n} ranks, {events:,} events in {wall:.1f} s wall "
        f"(target <= {TARGET_S:.0f} s: {ok}), {n / wall:.2f} ranks/s, executor {args.executor}, compute {used}"
    )
    print(
        f"  {wall * (os.cpu_count() or 1) / n:.2f} core-s per rank, fork server start, merge and CLI included; "
        f"load average after: {load_avg()}"
    )
    sample = [int(x) for x in args.sample.split(",")] if args.sample else sample_ranks(cfg)
    spec = ",".join(map(str, sample))
    part = os.path.join(tmp, "sample.trace")
    _, swall = tracer("record", args.config, "--ranks", spec, "--compute", other, "-o", part)
    a, b = streams(out, sample), streams(part, sample)
    same = [r for r in sample if a[r] == b[r]]
    verdict = (
        "same comm pattern" if len(same) == len(sample) else f"DIFFERENT on ranks {sorted(set(sample) - set(same))}"
    )
    print(
        f"same comm pattern, {used} vs {other} compute: ranks {spec} ({len(sample)} ranks, "
        f"{sum(len(a[r]) for r in sample):,} events, every column but ts): {verdict}; "
        f"{other} compute took {swall:.1f} s for them"
    )


def child(kind: str, config: str, rank: int) -> None:
    """One rank in this (fresh) process; prints its CPU seconds."""
    import torch

    import tracer.fake.compute  # noqa: F401  (the fork server has these loaded)
    import tracer.workloads.train  # noqa: F401
    from tracer import config as config_mod
    from tracer.modes.run import Job, run_job, torchrun_env

    torch.set_num_threads(1)  # as each rank of a 2-core pool gets
    cfg = config_mod.load(config)
    program = config_mod.program(cfg)
    if kind == "untraced":
        import torch.distributed as dist

        from tracer.capture import process_group as rpg

        torch.set_flush_denormal(True)
        os.environ.update(torchrun_env(rank, cfg.world_size))
        orig = dist.init_process_group

        def init_process_group(*a, **k):  # the same fake collectives, nothing hooked or recorded
            rpg.register_backend()
            orig(rpg.BACKEND, store=dist.HashStore(), rank=rank, world_size=cfg.world_size)

        dist.init_process_group = init_process_group
        start = time.process_time()
        program.run()
    else:
        job = Job(
            program=program,
            mode="fake",
            world_size=cfg.world_size,
            ranks=[rank],
            parts_dir=tempfile.mkdtemp(),
            compute=kind,
        )
        start = time.process_time()
        assert run_job(job) == 0
    cpu = time.process_time() - start
    print(f"{cpu:.4f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}")


def cost(kind: str, config: str, rank: int, repeats: int) -> tuple[float, float]:
    """(median CPU s, peak RSS MiB) of one rank, each run a fresh process."""
    runs, rss = [], 0.0
    for _ in range(repeats):
        p = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--config", config, "--rank", str(rank)],
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            sys.exit(f"per-rank cost ({kind}) failed:\n{p.stderr[-2000:]}")
        cpu, mib = p.stdout.strip().splitlines()[-1].split()
        runs.append(float(cpu))
        rss = max(rss, float(mib))
    return statistics.median(runs), rss


def per_rank_costs(args) -> None:
    rank = 100
    (u, _), (r, rss), (f, frss) = (cost(k, args.config, rank, 3) for k in ("untraced", "real", "fake"))
    workers = os.cpu_count() or 1
    print(
        f"per-rank cost, rank {rank} of {os.path.basename(args.config)}, CPU s (median of 3, one thread): "
        f"untraced {u:.2f} (anchor), recorded real compute {r:.2f} ({100 * (r / u - 1):+.0f} % vs untraced), "
        f"recorded fake compute {f:.2f}"
    )
    peak = max(rss, frss)
    print(
        f"  peak RSS of a rank process {peak:.0f} MiB (torch included; forked ranks share it with the server), "
        f"x{workers} at a time = {peak * workers / 1024:.2f} GiB (budget {TARGET_GIB:.0f} GiB)"
    )
    (dr, _), (df, _) = (cost(k, DEBUG, 0, 1) for k in ("real", "fake"))
    print(
        f"per-rank cost at TorchTitan debug model sizes (rank 0 of {os.path.basename(DEBUG)}): "
        f"real compute {dr:.1f} s, fake compute {df:.1f} s ({dr / df:.1f}x faster)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=SCALE)
    ap.add_argument("--sample", default="", help="ranks compared fake vs real (default: every stage's ends)")
    ap.add_argument("--executor", default="local", choices=["local", "ray"])
    ap.add_argument("--skip-full", action="store_true", help="only the per-rank costs")
    ap.add_argument("--skip-cost", action="store_true", help="only the full recording and the sample")
    ap.add_argument("--child", choices=["untraced", "real", "fake"], help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.config, a.rank)
        return
    from tracer import config as config_mod

    cfg = config_mod.load(a.config)
    with tempfile.TemporaryDirectory() as tmp:
        if not a.skip_full:
            full_and_sample(a, cfg, tmp)
    if not a.skip_cost:
        per_rank_costs(a)


if __name__ == "__main__":
    main()
