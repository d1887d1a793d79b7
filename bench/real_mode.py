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

Then `--numerics` on top of real mode (target <= 1.3x: each rank digests its own values, the
merge combines them), and local mode against real mode on the same SPMD program with numerics
(no target: which is the faster path), with each side's peak memory per recording process, on
the numerics corpus (tests/programs/numerics: world 4 layouts).

    python bench/real_mode.py [--world 8] [--pairs 3] [--programs ddp ddp_no_sync ddp_static_graph]
        [--numerics-programs tp_partial grad_factor]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
TARGET = 1.5


NUMERICS_TARGET = 1.3
PEAK = re.compile(r"peak memory per recording process: max ([0-9.]+) GiB")
_peaks: dict[str, float] = {}


def _wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    m = PEAK.search(proc.stderr)
    if m:
        _peaks[" ".join(cmd)] = max(_peaks.get(" ".join(cmd), 0.0), float(m[1]))
    return took


def paired(a: list[str], b: list[str], pairs: int) -> tuple[float, float, float]:
    """(median a seconds, median b seconds, median ratio a / b), a and b run in turn."""
    _wall(a), _wall(b)  # warm-up: page cache, the fork server's first imports
    times = [(_wall(a), _wall(b)) for _ in range(pairs)]
    ta, tb = zip(*times)
    return statistics.median(ta), statistics.median(tb), statistics.median(x / y for x, y in times)


def _record(script: str, world: int, mode: str, out: str, *extra: str) -> list[str]:
    return [os.path.join(BIN, "tracer"), "record", "--script", script, "-n", str(world), "--mode", mode,
            "-o", out, *extra]  # fmt: skip


def numerics_rows(programs: list[str], pairs: int) -> None:
    print(f"\n{'numerics program':<20} {'world':>5} {'real+num s':>11} {'real s':>8} {'ratio':>6}  "
          f"target <= {NUMERICS_TARGET}x   {'local+num s':>11} {'local/real':>10}  peak GiB real / local")  # fmt: skip
    for program in programs:
        script = os.path.join("tests", "programs", "numerics", program + ".py")
        with tempfile.TemporaryDirectory() as tmp:
            num = _record(script, 4, "real", os.path.join(tmp, "n.trace"), "--numerics", "--", "healthy")
            plain = _record(script, 4, "real", os.path.join(tmp, "p.trace"), "--", "healthy")
            local = _record(script, 4, "local", os.path.join(tmp, "l.trace"), "--numerics", "--", "healthy")
            tn, tp, ratio = paired(num, plain, pairs)
            tl, _, lr = paired(local, num, pairs)
        verdict = "PASS" if ratio <= NUMERICS_TARGET else "FAIL"
        peaks = f"{_peaks.get(' '.join(num), 0):.2f} / {_peaks.get(' '.join(local), 0):.2f}"
        print(
            f"{program:<20} {4:>5} {tn:>11.2f} {tp:>8.2f} {ratio:>6.2f}  {verdict:<16} {tl:>11.2f} {lr:>10.2f}  {peaks}"
        )


def row(program: str, world: int, pairs: int, port: int) -> tuple[float, float, float]:
    """(median tracer seconds, median torchrun seconds, median ratio) over `pairs` pairs."""
    script = os.path.join("tests", "programs", program + ".py")
    with tempfile.TemporaryDirectory() as tmp:
        a = _record(script, world, "real", os.path.join(tmp, "real.trace"))
        b = [os.path.join(BIN, "torchrun"), "--nproc-per-node", str(world), "--master-port", str(port), script]
        return paired(a, b, pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--programs", nargs="*", default=["ddp", "ddp_no_sync", "ddp_static_graph"])
    ap.add_argument("--numerics-programs", nargs="*", default=["tp_partial", "grad_factor"])
    args = ap.parse_args()
    print(f"{'program':<20} {'world':>5} {'real mode s':>12} {'torchrun s':>11} {'ratio':>7}  target <= {TARGET}x")
    for k, program in enumerate(args.programs):
        ta, tb, ratio = row(program, args.world, args.pairs, 29640 + k)
        verdict = "PASS" if ratio <= TARGET else "FAIL"
        print(f"{program:<20} {args.world:>5} {ta:>12.2f} {tb:>11.2f} {ratio:>7.2f}  {verdict}")
    if args.numerics_programs:
        numerics_rows(args.numerics_programs, args.pairs)


if __name__ == "__main__":
    main()
