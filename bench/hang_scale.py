"""`analyzer hang` post-mortem at scale: a synthetic hung job (bench/synth.py --hang), where one
rank died before an all-gather and its dp group waits on it.

    python bench/hang_scale.py [--ranks 16384] [--events 1000]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from synth import generate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=16384)
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--victim", type=int, default=12345)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hung.trace")
        generate(path, a.ranks, a.events, hang=a.victim)
        size = os.path.getsize(path)
        analyzer = os.path.join(os.path.dirname(sys.executable), "analyzer")
        t0 = time.perf_counter()
        p = subprocess.run([analyzer, "hang", path, "--json"], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 / 1024
    out = json.loads(p.stdout)
    roots = [(f["kind"], f["culprit_ranks"], len(f.get("waiting_ranks", []))) for f in out["findings"]]
    n = a.ranks * a.events
    print(f"synthetic hung job: {a.ranks} ranks x ~{a.events} events = {n / 1e6:.1f} M events, {size / 1e6:.0f} MB")
    print(f"analyzer hang: {wall:.1f} s wall, {peak:.2f} GiB peak RSS, {len(out['stuck_ranks'])} stuck ranks, "
          f"root causes {roots}")


if __name__ == "__main__":
    main()
