"""`analyzer check` on a synthetic trace with two seeded faults: wall time and peak memory.

    python bench/check_scale.py [--ranks 4096] [--events 1000]

The trace comes from bench/synth.py (FSDP x TP pattern, tp=8); the check must find exactly the
two faults (a skipped tp all-reduce on rank 17, a float64 all-gather on rank 99).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from synth import generate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4096)
    ap.add_argument("--events", type=int, default=1000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "synthetic.trace")
        t0 = time.perf_counter()
        generate(path, a.ranks, a.events, skip=17, dtype_fault=99)
        gen = time.perf_counter() - t0
        size = os.path.getsize(path)
        analyzer = os.path.join(os.path.dirname(sys.executable), "analyzer")
        t0 = time.perf_counter()
        p = subprocess.run([analyzer, "check", path, "--json"], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 / 1024
    found = sorted((f["kind"], tuple(f["culprit_ranks"])) for f in json.loads(p.stdout)["findings"])
    ok = found == [("dtype_mismatch", (99,)), ("missing_collective", (17,))]
    n = a.ranks * a.events
    print(f"synthetic trace: {a.ranks} ranks x {a.events} events = {n / 1e6:.1f} M events, "
          f"{size / 1e6:.0f} MB ({size / n:.0f} B/event), generated in {gen:.1f} s")
    print(f"{'analyzer check':<16}{wall:>8.1f} s wall{peak:>8.2f} GiB peak RSS   "
          f"faults found: {'both, nothing else' if ok else found}")


if __name__ == "__main__":
    main()
