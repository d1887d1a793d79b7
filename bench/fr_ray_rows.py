"""Bench row: a 100,000-rank hang post-mortem on Ray (issue 39), the dumps simulated where they
are decoded. Each Ray worker makes its share of the dumps in memory (bench/fr_scale_synth.py:
torch's pickle bytes, NCCL semantics, one stalled rank, 3 ranks without a dump: no 35 GB on
disk), decodes them, keeps the columns and sends the driver one summary per dump; the driver
plans each group's frontier window, the workers send back only those entries, and the driver
gives the verdict. What is timed: decoding + the reduction (on_ray.run) and the verdict
(analyze); the driver's peak memory is its own (RUSAGE_SELF: the workers hold the columns).

    python bench/fr_ray_rows.py [--ranks 100000] [--entries 200] [--workers N]

Target: driver <= 2 GiB, verdict right (the stalled rank and the missing ones named).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fr_scale_synth  # noqa: E402


class Maker:
    """make(rank) -> (name, pickle bytes) on a Ray worker: the job simulated once per process."""

    def __init__(self, ranks: int, entries: int, stall: int) -> None:
        self.ranks, self.entries, self.stall = ranks, entries, stall
        self._state: tuple | None = None

    def __call__(self, rank: int) -> tuple[str, bytes]:
        if self._state is None:
            total = self.entries + 500
            stall_at = total - 300 - (total - 300) % 4 + 1
            self._state = fr_scale_synth.simulate(self.ranks, total, "realistic", self.stall, stall_at)
        issued, done = self._state
        data = fr_scale_synth.dump_bytes(
            rank, self.ranks, "realistic", self.entries, int(issued[rank]), int(done[rank])
        )
        return f"nccl_trace_rank_{rank}", data


def driver(ranks: int, entries: int, workers: int) -> dict:
    """Runs in its own process (its peak memory is the row's)."""
    from analyzer.hang import analyze
    from analyzer.sources.flight_recorder import on_ray
    from analyzer.sources.flight_recorder.options import ReadOptions

    stall, missing = 12345 % ranks, sorted({(7 * ranks) // 10, (3 * ranks) // 10 + 1, ranks - 2})
    items = [r for r in range(ranks) if r not in missing]
    t0 = time.perf_counter()
    trace = on_ray.run(
        items,
        Maker(ranks, entries, stall),
        f"{ranks} simulated dumps",
        ReadOptions(frontier=True, ray="local", jobs=workers),
    )
    t1 = time.perf_counter()
    report = analyze(trace)
    t2 = time.perf_counter()
    found = [(f.kind.name, f.culprit_ranks) for f in report.findings]
    culprits = {r for _, c in found for r in c}
    return {
        "ranks": ranks,
        "entries": entries,
        "events_kept": trace.n_events,
        "decode_and_reduce_s": t1 - t0,
        "verdict_s": t2 - t1,
        "driver_peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024,
        "stalled": stall,
        "missing": missing,
        "right": stall in culprits and set(missing) <= culprits and culprits <= set(missing) | {stall},
        "findings": found[:8],
    }


def rows(row, ranks: int = 100_000, entries: int = 200, workers: int | None = None) -> None:
    workers = workers or os.cpu_count() or 1
    env = dict(os.environ)  # the workers import fr_scale_synth (Maker) from here
    env["PYTHONPATH"] = os.pathsep.join(x for x in (HERE, env.get("PYTHONPATH", "")) if x)
    p = subprocess.run(
        [
            sys.executable,
            __file__,
            "--driver",
            "--ranks",
            str(ranks),
            "--entries",
            str(entries),
            "--workers",
            str(workers),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    if p.returncode != 0:
        row(f"hang on {ranks:,} simulated FR dumps on Ray", "failed", "driver <= 2 GiB", p.stderr.strip()[-200:], False)
        return
    out = json.loads(p.stdout.strip().splitlines()[-1])
    row(
        f"hang on {ranks:,} simulated FR dumps x {entries} entries on Ray ({workers} workers)",
        f"decode + reduce {out['decode_and_reduce_s']:.0f} s, verdict {out['verdict_s']:.1f} s, driver "
        f"{out['driver_peak_gib']:.2f} GiB, {out['events_kept']:,} entries kept",
        "driver <= 2 GiB, verdict right",
        f"truth: stalled {out['stalled']}, missing {out['missing']}; analyzer: {out['findings']}",
        out["right"] and out["driver_peak_gib"] <= 2,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=100_000)
    ap.add_argument("--entries", type=int, default=200)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.driver:
        print(json.dumps(driver(a.ranks, a.entries, a.workers or os.cpu_count() or 1)))
        return

    def row(goal, figure, target, note, ok):
        print(f"  {goal}: {figure}   (target {target}) {note}  {'PASS' if ok else 'FAIL'}", flush=True)

    rows(row, a.ranks, a.entries, a.workers)


if __name__ == "__main__":
    main()
