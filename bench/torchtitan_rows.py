"""Bench rows for `tracer record --torchtitan` (TorchTitan 0.3's llama3 debug model).

- recording cost: `tracer record --torchtitan ... -n 8` against the same adapter entrypoint run
  unrecorded (`python -m tracer.adapters.torchtitan.entry`, one process per rank with torch's
  own fake backend, as many at a time as the recorder's pool runs): the ratio is what recording
  adds (hooks, part files, the up-front config check, the merge);
- fake compute: `--compute fake` against `--compute real` on the same rank (rank 0 of 8; every
  rank costs about the same), at the debug model's own batch and a long sequence, where the math
  is what a real dry run pays for.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from measure import run

LAYOUT = [
    "--parallelism.data_parallel_shard_degree",
    "4",
    "--parallelism.tensor_parallel_degree",
    "2",
    "--training.steps",
    "2",
]
SHORT = ["--training.seq_len", "256", "--training.local_batch_size", "2"]
LONG = ["--training.seq_len", "2048", "--training.local_batch_size", "8"]


def unrecorded(n: int, args: list[str]) -> float:
    """Wall seconds of n ranks of the adapter entrypoint without commtrace's recorder."""
    from tracer.adapters.torchtitan.job import from_spec

    argv = [
        sys.executable,
        "-m",
        "tracer.adapters.torchtitan.entry",
        *from_spec("llama3:llama3_debugmodel", args).args,
    ]

    def one(rank: int) -> int:
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(n),
            LOCAL_WORLD_SIZE=str(n),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT="29500",
            OMP_NUM_THREADS="1",
        )
        return subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode

    t0 = time.perf_counter()
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        codes = list(pool.map(one, range(n)))
    if any(codes):
        raise RuntimeError(f"unrecorded TorchTitan ranks failed: {codes}")
    return time.perf_counter() - t0


def rows(work: str, row) -> None:
    if importlib.util.find_spec("torchtitan") is None:
        row(
            "record TorchTitan llama3 debug FSDP 4 x TP 2, 8 ranks",
            "skipped: TorchTitan not installed",
            "-",
        )
        return
    out = os.path.join(work, "tt.trace")
    rec = run(
        "tracer",
        "record",
        "--torchtitan",
        "llama3:llama3_debugmodel",
        "-n",
        "8",
        "-o",
        out,
        "--",
        *LAYOUT,
        *SHORT,
    )
    if rec.code != 0:
        row(
            "record TorchTitan llama3 debug FSDP 4 x TP 2, 8 ranks",
            f"failed: {rec.stderr.strip()[-160:]}",
            "<= 1.5x",
        )
        return
    off = unrecorded(8, [*LAYOUT, *SHORT])
    ok = "PASS" if rec.wall <= 1.5 * off else "MISS"
    row(
        "record TorchTitan llama3 debug FSDP 4 x TP 2, 8 ranks, vs the same run unrecorded",
        f"{rec.wall / off:.2f}x ({rec.wall:.0f} s)",
        "<= 1.5x",
        f"{ok}; anchor: unrecorded {off:.0f} s",
    )
    times = {}
    for compute in ("fake", "real"):
        r = run(
            "tracer",
            "record",
            "--torchtitan",
            "llama3:llama3_debugmodel",
            "-n",
            "8",
            "--ranks",
            "0",
            "--compute",
            compute,
            "-o",
            os.path.join(work, f"tt_{compute}.trace"),
            "--",
            *LAYOUT,
            *LONG,
        )
        if r.code != 0 or "recorded again with real compute" in r.stderr:
            row(
                f"TorchTitan --compute {compute}",
                f"failed: {r.stderr.strip()[-160:]}",
                ">= 3x",
            )
            return
        times[compute] = r.wall
    speedup = times["real"] / times["fake"]
    row(
        "TorchTitan llama3 debug FSDP 4 x TP 2 (rank 0 of 8, seq 2048 x batch 8): --compute fake vs real",
        f"{speedup:.1f}x faster ({times['fake']:.0f} s vs {times['real']:.0f} s)",
        ">= 3x",
        "PASS" if speedup >= 3 else "MISS",
    )
