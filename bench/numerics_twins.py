"""Ground truth of the numerics twins (tests/programs/numerics/, issue 37): each program run for
real with torchrun (gloo, CPU) at its world and at world 1, every rank's `digest` lines
(NUMERICS_PRINT=1, common.py) combined into global values, and

- the figures the programs' docstrings quote: each step's loss per rank, the last step's
  parameter sums, each side's first value off the world-1 run (step, value, reference);
- for each healthy twin, the distribution of its relative errors against world 1 (max, p99),
  in two scales: the sum against the sum (`rel`: meaningless for a value that is zero up to
  rounding) and the sum against sqrt(numel x sumsq) of the reference (`scaled`: analyzer
  numerics' scale), with the norm's relative error beside them.

    python bench/numerics_twins.py [--only ddp_batchnorm ...] [--dtypes fp32 bf16] [--json out.json]

Each run is a real torchrun of a few seconds; the whole table takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "tests", "programs", "numerics")
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
LINE = re.compile(r"rank (\d+) step (\d+) (.+?): sum (\S+) sumsq (\S+) numel (\d+) layout (\w+)$")
PHASE = {"output": 0, "loss": 1, "grad": 2, "param": 3, "buffer": 3}
TOLERANCE = {"fp32": 1e-4, "bf16": 3e-2}  # analyzer numerics' defaults, for the first divergence


@dataclass(kw_only=True, slots=True)
class Case:
    """One twin: its program, the world it runs at, and the options after the variant."""

    program: str
    """file name under tests/programs/numerics/, without .py"""
    world: int
    """the parallel run's world size (the reference is world 1)"""
    args: list[str] = field(default_factory=list)
    """options after VARIANT (e.g. --schedule 1f1b)"""
    bf16: bool = True
    """whether the program takes --dtype bf16"""

    @property
    def name(self) -> str:
        return " ".join([self.program, *self.args])


CASES = [
    Case(program="ddp_batchnorm", world=4),
    Case(program="pipeline_scale_grads", world=2, args=["--schedule", "gpipe"]),
    Case(program="pipeline_scale_grads", world=4, args=["--schedule", "1f1b"]),
    Case(program="pipeline_split", world=2, args=["--schedule", "gpipe"]),
    Case(program="pipeline_split", world=4, args=["--schedule", "1f1b"]),
    Case(program="vocab_parallel_ce", world=4),
    Case(program="tied_untied", world=4),
    Case(program="cp_position_ids", world=4),
    Case(program="ddp_uneven_padding", world=4),
    Case(program="ep_all_to_all_order", world=4),
]


SAVE: list[str] = []  # --save DIR: each run's stdout kept there


def run(program: str, variant: str, world: int, args: list[str], port: int) -> str:
    cmd = [TORCHRUN, "--nproc-per-node", str(world), "--master-port", str(port),
           os.path.join(CORPUS, program + ".py"), variant, *args]  # fmt: skip
    env = dict(os.environ, NUMERICS_PRINT="1", PYTHONPATH=REPO, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=CORPUS, capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    if SAVE:
        name = "-".join([program, variant, str(world), *(a.lstrip("-") for a in args)])
        with open(os.path.join(SAVE[0], name + ".log"), "w") as f:
            f.write(proc.stdout)
    return proc.stdout


def combine(stdout: str) -> tuple[dict, dict]:
    """(global values, per-rank values): (step, what) -> (sum, sumsq, numel), in the programs'
    order; a `part` adds up over the ranks, a `mean` is averaged, a `replica` is the lowest rank's."""
    per_rank: dict = {}
    for line in stdout.splitlines():
        m = LINE.match(line.strip())
        if m:
            rank, step, what, s, sq, n, layout = m.groups()
            per_rank.setdefault((int(step), what), {})[int(rank)] = (float(s), float(sq), int(n), layout)
    glob = {}
    for key, ranks in per_rank.items():
        vals = [ranks[r] for r in sorted(ranks)]
        layout = vals[0][3]
        if layout == "part":
            total = math.fsum(v[0] for v in vals)
            # a scalar in parts (each rank's share of the loss): its square is the square of the sum
            sumsq = total * total if vals[0][2] == 1 else math.fsum(v[1] for v in vals)
            glob[key] = (total, sumsq, sum(v[2] for v in vals) if vals[0][2] != 1 else 1)
        elif layout == "mean":
            k = len(vals)
            mean = math.fsum(v[0] for v in vals) / k
            glob[key] = (mean, mean * mean, vals[0][2])
        else:
            glob[key] = vals[0][:3]
    order = sorted(glob, key=lambda k: (k[0], PHASE[k[1].split()[0]]))
    return {k: glob[k] for k in order}, per_rank


def errors(a: tuple, ref: tuple) -> tuple[float, float, float]:
    """(rel, scaled, norm) relative errors of a value's digest against the reference's."""
    d = abs(a[0] - ref[0])
    rel = d / abs(ref[0]) if ref[0] else (0.0 if d == 0 else math.inf)
    scale = math.sqrt(ref[2] * ref[1])
    scaled = d / scale if scale else (0.0 if d == 0 else math.inf)
    na, nr = math.sqrt(a[1]), math.sqrt(ref[1])
    norm = abs(na - nr) / nr if nr else (0.0 if na == 0 else math.inf)
    return rel, scaled, norm


def first_divergence(run: dict, ref: dict, tol: float) -> str:
    for key, val in run.items():
        if key not in ref:
            return f"step {key[0]} {key[1]}: only here (sum {val[0]:.9g})"
        rel, scaled, norm = errors(val, ref[key])
        if max(scaled, norm) > tol:
            where = f"step {key[0]} {key[1]}: sum {val[0]:.9g} vs {ref[key][0]:.9g}"
            return f"{where} (scaled {scaled:.3g}, norm {norm:.3g})"
    missing = [k for k in ref if k not in run]
    if missing:
        return f"step {missing[0][0]} {missing[0][1]}: only in the reference"
    return "none"


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(q * len(xs))) - 1)] if xs else math.nan


def figures(label: str, glob: dict, per_rank: dict) -> list[str]:
    out = []
    steps = sorted({k[0] for k in glob})
    for step in steps:
        ranks = per_rank.get((step, "loss"), {})
        out.append(f"  {label} step {step} loss: " + ", ".join(f"r{r} {v[0]:.9g}" for r, v in sorted(ranks.items())))
    last = steps[-1]
    params = [(k[1][6:], v[0]) for k, v in glob.items() if k[0] == last and k[1].startswith("param ")]
    out.append(f"  {label} params after step {last}: " + ", ".join(f"{n} {s:.9g}" for n, s in params))
    return out


def study(case: Case, dtype: str, port: int) -> dict:
    args = [*case.args, "--dtype", dtype]
    runs = {}
    for variant, world in (("healthy", 1), ("healthy", case.world), ("buggy", case.world)):
        runs[variant, world] = combine(run(case.program, variant, world, args, port))
    ref = runs["healthy", 1][0]
    report = {"case": case.name, "dtype": dtype, "world": case.world, "lines": []}
    lines = report["lines"]
    for (variant, world), (glob, per_rank) in runs.items():
        lines += figures(f"{variant}@{world}", glob, per_rank)
    tol = TOLERANCE[dtype]
    for variant, world in (("healthy", case.world), ("buggy", case.world)):
        first = first_divergence(runs[variant, world][0], ref, tol)
        report[f"first_{variant}_{world}"] = first
        lines.append(f"  first off world 1 ({variant}@{world}, tol {tol}): {first}")
    bug = runs["buggy", case.world][0]
    gaps = [(max(errors(v, ref[k])[1:]), f"step {k[0]} {k[1]}") for k, v in bug.items() if k in ref]
    top = max(gaps) if gaps else (math.nan, "-")
    report["buggy_max"] = top
    lines.append(f"  buggy@{case.world} largest error (max of scaled, norm): {top[0]:.3g} at {top[1]}")
    healthy = runs["healthy", case.world][0]
    errs = {kind: {"rel": [], "scaled": [], "norm": []} for kind in ("output", "grad", "param")}
    worst: dict = {kind: [] for kind in errs}
    for key, val in healthy.items():
        kind = key[1].split()[0]
        if key in ref and kind in errs:
            e = errors(val, ref[key])
            for name, x in zip(("rel", "scaled", "norm"), e):
                errs[kind][name].append(x)
            worst[kind].append((max(e[1], e[2]), f"step {key[0]} {key[1]}"))
    report["errors"] = {}
    for kind, by in errs.items():
        stats = {name: (max(xs) if xs else math.nan, quantile(xs, 0.99)) for name, xs in by.items()}
        report["errors"][kind] = stats
        lines.append(
            f"  healthy@{case.world} vs @1 {kind:<6} n={len(by['rel']):<3} "
            + "  ".join(f"{name} max {mx:.3g} p99 {p:.3g}" for name, (mx, p) in stats.items())
        )
        top = sorted(worst[kind], reverse=True)[:3]
        lines.append("    worst (max of scaled, norm): " + "; ".join(f"{w} {e:.3g}" for e, w in top))
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", help="programs to run (default: every case)")
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--json", help="also write every report here")
    ap.add_argument("--save", help="keep each run's stdout (its digest lines) in this folder")
    args = ap.parse_args()
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        SAVE.append(args.save)
    reports = []
    for k, case in enumerate(c for c in CASES if not args.only or c.program in args.only):
        for dtype in args.dtypes:
            if dtype == "bf16" and not case.bf16:
                continue
            try:
                rep = study(case, dtype, 29600 + k)
            except SystemExit as e:  # one case's failed run: say so, go on with the others
                print(f"{case.name} [{dtype}] FAILED: {e}", flush=True)
                continue
            print(f"{rep['case']} [{dtype}] world {case.world}", *rep["lines"], sep="\n", flush=True)
            reports.append(rep)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)


if __name__ == "__main__":
    main()
