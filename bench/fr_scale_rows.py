"""Bench rows for post-mortems at scale (issue 39): `analyzer hang` on a hanging job's Flight
Recorder dumps (bench/fr_scale_synth.py: torch's own pickle bytes, NCCL semantics, one stalled
rank, dumps missing and cut short) against what the same run measures beside it.

    python bench/fr_scale_rows.py [--quick] [--sizes 4096,16384] [--reuse DIR] [--fr-trace]

- 4,096 / 16,384 ranks x 2,000 entries: the verdict's wall time (a fresh process, as a user
  runs it), its peak memory, dumps per second per core, against a plain one-process
  `pickle.load` of every dump measured in the same run (each twice, alternating: the best).
  Targets at 16,384: <= 60 s on this 2-core box, <= 12 GiB (the process tree), <= half the
  plain unpickle; the verdict right (the stalled rank and every missing rank named, nothing
  else).
- 1,024 ranks, both dump shapes (dp x tp multi-group, one world group): `analyzer hang` and
  `analyzer check` against torch's fr_trace on the same dumps (a stalled rank, no dump missing:
  fr_trace stops at a missing dump). Target: hang >= 20x faster than fr_trace, verdict right.
Generated dumps go under the work folder (a temp dir) and are deleted after their row;
`--reuse DIR` reads DIR/dumps + DIR/truth.json (made by fr_scale_synth.py) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fr_compare  # noqa: E402
import fr_scale_synth  # noqa: E402
from measure import json_out, run  # noqa: E402

from traceformat.workers import cpu_count  # noqa: E402


def unpickle_time(folder: str) -> float:
    """Wall time of plain pickle.load of every dump, one fresh process, the cyclic collector off
    (as both readers run): fr_rows.unpickle_time, past a file cut short."""
    code = (
        "import gc, os, pickle, sys, time; gc.disable(); t = time.perf_counter(); d = sys.argv[1]\n"
        "for n in sorted(os.listdir(d)):\n"
        "    try:\n        pickle.load(open(os.path.join(d, n), 'rb'))\n"
        "    except (EOFError, pickle.UnpicklingError):\n        pass\n"
        "print(time.perf_counter() - t)"
    )
    p = subprocess.run([sys.executable, "-c", code, folder], capture_output=True, text=True, check=True)
    return float(p.stdout)


def _dumps(work: str, ranks: int, kind: str, missing: int, truncated: int, reuse: str | None) -> tuple[str, dict, bool]:
    """(dumps folder, truth, whether it was generated here and is to be deleted)."""
    if reuse:
        with open(os.path.join(reuse, "truth.json")) as f:
            return os.path.join(reuse, "dumps"), json.load(f), False
    folder = os.path.join(work, f"fr_{kind}_{ranks}", "dumps")
    truth = fr_scale_synth.generate(folder, ranks, 2000, kind, missing=missing, truncated=truncated, jobs=cpu_count())
    return folder, truth, True


def verdict(out: dict, truth: dict) -> tuple[bool, str]:
    """Whether `analyzer hang --json` named the stalled rank and every missing rank (as
    stalled_rank or missing_rank findings) and no other culprit."""
    found = out.get("findings", [])
    culprits = {r for f in found for r in f["culprit_ranks"]}
    stalled = {r for f in found if f["kind"] == "stalled_rank" for r in f["culprit_ranks"]}
    gone = set(truth["missing"]) | set(truth["truncated"])
    ok = truth["stalled"] in stalled and gone <= culprits and culprits <= gone | {truth["stalled"]}
    text = "; ".join(f"{f['kind']} {f['culprit_ranks']}" for f in found[:6]) + (" ..." if len(found) > 6 else "")
    return ok, text


def versus_unpickle(work: str, row, sizes: list[int], reuse: str | None = None) -> None:
    cores = cpu_count()
    for n in sizes:
        folder, truth, made = _dumps(work, n, "realistic", 3, 1, reuse)
        # twice each, alternating, the best of each: 16k dumps (6.7 GB) do not all fit the page
        # cache, so whichever reads second finds the other's last files cached and its own
        # first ones gone; alternating gives both the same chances (cold or warm)
        t_pickle, r = unpickle_time(folder), run("analyzer", "hang", folder, "--json")
        t_pickle, r2 = min(t_pickle, unpickle_time(folder)), run("analyzer", "hang", folder, "--json")
        r = min(r, r2, key=lambda x: x.wall)
        ok, said = verdict(json_out(r), truth)
        fast = r.wall <= t_pickle / 2
        in_time = r.wall <= 60 * n / 16384  # 60 s at 16,384: the same rate below
        row(
            f"analyzer hang on {n:,} FR dumps x 2,000 entries (dp x tp, 1 stalled, {len(truth['missing'])} missing, "
            f"{len(truth['truncated'])} cut short)",
            f"{r.wall:.1f} s, {r.tree_gib:.2f} GiB (its workers included; this process {r.peak_gib:.2f}), "
            f"{n / r.wall / cores:.0f} dumps/s/core "
            f"({t_pickle / r.wall:.1f}x faster than unpickling them)",
            f"<= {60 * n / 16384:.0f} s, <= 12 GiB, <= plain unpickle / 2 ({t_pickle / 2:.1f} s), verdict right",
            f"anchor: one-process pickle.load of every dump {t_pickle:.1f} s ({n / t_pickle:.0f} dumps/s); "
            f"truth: stalled {truth['stalled']}, missing {truth['missing'] + truth['truncated']}; analyzer: {said}",
            ok and fast and in_time and r.tree_gib <= 12 and r.code == 1,
        )
        if made:
            shutil.rmtree(os.path.dirname(folder))


def versus_fr_trace(work: str, row, quick: bool) -> None:
    n = 64 if quick else 1024
    for kind in ("realistic", "simple"):
        folder, truth, _ = _dumps(work, n, kind, 0, 0, None)
        hang = run("analyzer", "hang", folder, "--json")
        ok, said = verdict(json_out(hang), truth)
        check = run("analyzer", "check", folder, "--json")
        t_fr, fr = fr_compare.fr_trace(folder)
        ratio = t_fr / hang.wall
        row(
            f"analyzer hang on {n:,} {kind} FR dumps x 2,000 entries (1 stalled rank)",
            f"{hang.wall:.2f} s, {hang.peak_gib:.2f} GiB ({ratio:.1f}x faster than fr_trace); "
            f"check (whole history) {check.wall:.2f} s, {check.peak_gib:.2f} GiB ({t_fr / check.wall:.1f}x)",
            ">= 20x faster than fr_trace, verdict right",
            f"anchor: torch fr_trace {t_fr:.1f} s, says: {fr}; truth: stalled {truth['stalled']}; analyzer: {said}",
            ok and ratio >= 20,
        )
        shutil.rmtree(os.path.dirname(folder))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1/16 of the sizes")
    ap.add_argument("--sizes", default="", help="comma list (default 4096,16384; quick 256,1024)")
    ap.add_argument("--reuse", help="a folder of fr_scale_synth.py output (dumps/, truth.json) for one size")
    ap.add_argument("--fr-trace", action="store_true", help="also the 1,024-rank rows against fr_trace")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",") if x] or ([256, 1024] if a.quick else [4096, 16384])

    def row(goal, figure, target, note, ok):
        print(f"  {goal}: {figure}   (target {target}) {note}  {'PASS' if ok else 'FAIL'}", flush=True)

    work = tempfile.mkdtemp(prefix="fr_scale_")
    try:
        versus_unpickle(work, row, sizes, a.reuse)
        if a.fr_trace:
            versus_fr_trace(work, row, a.quick)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
