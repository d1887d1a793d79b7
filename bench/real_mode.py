"""Real mode's cost against the program's own torchrun run: the same program, the same world, the
two commands timed in turn (A B A B ...) so each pair sees the same seconds of the machine.

A: `tracer record --script P -n N --mode real` (a process per rank on real gloo, every op
recorded, the trace merged). B: `torchrun --nproc-per-node N P` (gloo on this CPU, nothing
recorded). The ratio is the median of the pairs' wall-time ratios; the target (issue: real mode
at world 8 costs at most 1.5x the program's own torchrun run) is printed PASS / FAIL per row.
torchrun starts N fresh Pythons that each import torch; tracer forks its ranks from one server
that imported torch once, which is why A can be the faster of the two. The programs are those of
tests/programs that pick gloo themselves on a CPU: torchrun cannot run one that asks for NCCL
there (real mode serves any backend name with gloo).

    python bench/real_mode.py [--world 8] [--pairs 3] [--programs ddp ddp_no_sync ddp_static_graph]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
TARGET = 1.5


def _wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return took


def row(program: str, world: int, pairs: int, port: int) -> tuple[float, float, float]:
    """(median tracer seconds, median torchrun seconds, median ratio) over `pairs` pairs."""
    script = os.path.join("tests", "programs", program + ".py")
    with tempfile.TemporaryDirectory() as tmp:
        a = [os.path.join(BIN, "tracer"), "record", "--script", script, "-n", str(world), "--mode", "real",
             "-o", os.path.join(tmp, "real.trace")]  # fmt: skip
        b = [os.path.join(BIN, "torchrun"), "--nproc-per-node", str(world), "--master-port", str(port), script]
        _wall(a), _wall(b)  # warm-up: page cache, the fork server's first imports
        times = [(_wall(a), _wall(b)) for _ in range(pairs)]
    ta, tb = zip(*times)
    return statistics.median(ta), statistics.median(tb), statistics.median(x / y for x, y in times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--programs", nargs="+", default=["ddp", "ddp_no_sync", "ddp_static_graph"])
    args = ap.parse_args()
    print(f"{'program':<20} {'world':>5} {'real mode s':>12} {'torchrun s':>11} {'ratio':>7}  target <= {TARGET}x")
    for k, program in enumerate(args.programs):
        ta, tb, ratio = row(program, args.world, args.pairs, 29640 + k)
        verdict = "PASS" if ratio <= TARGET else "FAIL"
        print(f"{program:<20} {args.world:>5} {ta:>12.2f} {tb:>11.2f} {ratio:>7.2f}  {verdict}")


if __name__ == "__main__":
    main()
