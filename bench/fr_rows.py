"""Bench rows for `analyzer check` on Flight Recorder dumps against torch's fr_trace (issue 16),
both kinds of synthetic dumps (bench/fr_synth.py) measured side by side in one run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import fr_compare
from fr_synth import generate as fr_generate

from traceformat.workers import cpu_count


def rows(work: str, row, quick: bool) -> None:
    """Both kinds of dumps, side by side in one run: plain pickle.load of every file on one
    core (the floor a single reader cannot beat), analyzer check and torch's fr_trace. Goal
    (issue 16): analyzer check >= 20x faster than fr_trace on both; on the single-group dumps
    that means below the single-core unpickle time, and reading in parallel on this machine's
    cores the limit is the unpickle time divided by them (half, on 2 cores)."""
    n = 64 if quick else 1024
    cores = cpu_count()
    for kind in ("realistic", "simple"):
        folder = os.path.join(work, f"fr_{kind}_{n}")
        fr_generate(folder, n, 2000, kind)
        t_pickle = unpickle_time(folder)
        t_us, ours = fr_compare.analyzer_check(folder)
        t_fr, _ = fr_compare.fr_trace(folder)
        ratio = t_fr / t_us
        target, ok = ">= 20x faster than fr_trace", ratio >= 20
        if kind == "simple":
            target += f", <= unpickle / {cores} cores ({t_pickle / cores:.1f} s)"
            ok = ok and t_us <= t_pickle / cores
        row(
            f"analyzer check on {n} {kind} FR dumps x 2,000 entries",
            f"{t_us:.2f} s ({ratio:.1f}x faster than fr_trace)",
            target,
            f"anchors: single-core pickle.load {t_pickle:.1f} s, torch fr_trace {t_fr:.1f} s; analyzer: {ours}",
            ok,
        )
        shutil.rmtree(folder)


def unpickle_time(folder: str) -> float:
    """Wall time of plain pickle.load of every dump, one process (a fresh one: same start as the
    commands), the cyclic collector off as both readers run it."""
    code = (
        "import gc, os, pickle, sys, time; gc.disable(); t = time.perf_counter(); d = sys.argv[1]\n"
        "for n in sorted(os.listdir(d)):\n    pickle.load(open(os.path.join(d, n), 'rb'))\n"
        "print(time.perf_counter() - t)"
    )
    p = subprocess.run([sys.executable, "-c", code, folder], capture_output=True, text=True, check=True)
    return float(p.stdout)
