"""torch's Flight Recorder analyzer (`fr_trace`) vs `analyzer check`, on the same dumps.

    python bench/fr_compare.py [--dumps DIR] [--scale 64,256,1024] [--entries 2000] [--skip-cases] [--corpus]

(a) Seeded bugs, real gloo dumps (tests/flight_recorder/make_dumps.py): what each tool reports (kind / error
    type and culprits). fr_trace reads only pickles named PREFIX_RANK and needs pg_config, so it
    gets the repaired pickles copied to `rank_R`; analyzer gets the raw pickle, the JSON and the
    repaired form. Both run as a user would, without extra flags.
(c) The peer corpus (tests/flight_recorder/corpus.py, `--corpus`): fr_trace's verdict next to check's and
    hang's on every case (the table in docs/flight_recorder_corpus.md).
(b) Synthetic healthy dumps (bench/fr_synth.py) at each scale: wall time of each command (a fresh
    process: startup and torch import included, as a user pays them) and the ratio, same run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BIN = os.path.dirname(sys.executable)
CASES = {
    "healthy": "no findings",
    "size": "shape_mismatch [2]",
    "op": "op_mismatch [1]",
    "skip": "missing_collective [2]",
    "dead": "rank 3 died (float64), no dump: [3]",
    "cycle": "4-rank cross-group wait cycle",
}


def fr_trace(folder: str) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", folder], capture_output=True, text=True
    )
    return time.perf_counter() - t, _fr_summary(p.returncode, p.stdout + p.stderr)


def _fr_summary(rc: int, text: str) -> str:
    if rc != 0:
        last = [ln for ln in text.strip().splitlines() if ln.strip()][-1]
        return f"crash: {last[:70]}"
    errors = re.findall(r"Culprit rank (\d+); Error type: (\w+)", text)
    missing = re.findall(r"missing ranks: (\{[\d, ]+\})", text)
    undecided = text.count("We cannot decide")
    parts = [f"{kind} [{rank}]" for rank, kind in errors[:3]] + [f"missing ranks {m}" for m in missing[:2]]
    more = len(errors) + len(missing) - len(parts[:5])
    out = "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
    if undecided:
        out += ("; " if out else "") + f"{undecided}x 'cannot decide'"
    return out or "no findings"


def analyzer_check(folder: str) -> tuple[float, str]:
    import json

    t = time.perf_counter()
    p = subprocess.run([os.path.join(BIN, "analyzer"), "check", folder, "--json"], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode == 2:
        return wall, f"error: {p.stderr.strip()[:70]}"
    found = json.loads(p.stdout)["findings"]
    text = "; ".join(f"{f['kind']} {f['culprit_ranks']}" for f in found[:3])
    return wall, (text + (f" (+{len(found) - 3} more)" if len(found) > 3 else "")) or "no findings"


def _fr_copy(src: str, dst: str) -> str:
    """fr_trace wants PREFIX_RANK names (no extension)."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        shutil.copy(os.path.join(src, name), os.path.join(dst, os.path.splitext(name)[0]))
    return dst


def seeded(dumps: str, work: str) -> None:
    if not os.path.isdir(os.path.join(dumps, "healthy")):
        print(f"generating real gloo dumps in {dumps} ...", flush=True)
        subprocess.run(
            [sys.executable, os.path.join(REPO, "tests", "flight_recorder", "make_dumps.py"), dumps],
            check=True,
            capture_output=True,
        )
    print("\n(a) seeded bugs, 4 gloo ranks: what each tool reports")
    print(
        "| case | truth | fr_trace (repaired pickle) | analyzer (raw pickle) | analyzer (JSON) | analyzer (repaired) |"
    )
    print("|---|---|---|---|---|---|")
    for case, truth in CASES.items():
        _, fr = fr_trace(_fr_copy(os.path.join(dumps, case, "repaired"), os.path.join(work, "fr_" + case)))
        ours = [analyzer_check(os.path.join(dumps, case, form))[1] for form in ("pickle", "json", "repaired")]
        print(f"| {case} | {truth} | {fr} | " + " | ".join(ours) + " |", flush=True)


def corpus_table(work: str) -> None:
    """(c) the peer corpus (tests/flight_recorder/corpus.py): fr_trace's verdict and commtrace's `check` and
    `hang` on every case, next to the hand-derived truth (docs/flight_recorder_corpus.md)."""
    sys.path.insert(0, os.path.join(REPO, "tests", "flight_recorder"))
    import corpus

    folder = os.path.join(work, "corpus")
    cases = corpus.write(folder)
    print("\n(c) peer corpus: fr_trace vs commtrace (check; hang root causes)")
    print("| case | truth (check; hang) | fr_trace | analyzer check | analyzer hang |")
    print("|---|---|---|---|---|")
    for name, (_, want_check, want_hang) in cases.items():
        path = os.path.join(folder, name)
        _, fr = fr_trace(path)
        _, ours = analyzer_check(path)
        truth = "; ".join(f"{k} {c}" for k, c in want_check) or "no findings"
        truth += " / " + ("; ".join(f"{k} {c}" for k, c in want_hang) or "no hang" if want_hang is not None else "-")
        print(f"| {name} | {truth} | {fr} | {ours} | {analyzer_hang(path)} |", flush=True)


def analyzer_hang(folder: str) -> str:
    import json

    p = subprocess.run([os.path.join(BIN, "analyzer"), "hang", folder, "--json"], capture_output=True, text=True)
    if p.returncode == 2:
        return f"error: {p.stderr.strip()[:70]}"
    found = json.loads(p.stdout)["findings"]
    return "; ".join(f"{f['kind']} {f['culprit_ranks']}" for f in found) or "no hang"


def scale(work: str, sizes: list[int], entries: int) -> None:
    sys.path.insert(0, HERE)
    from fr_synth import generate

    print(f"\n(b) synthetic healthy dumps x {entries} entries: wall time per command (fresh process)")
    print("| ranks | fr_trace | analyzer check | ratio | fr_trace says | analyzer says |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        folder = os.path.join(work, f"synth_{n}")
        generate(folder, n, entries)
        t_fr, fr = fr_trace(folder)
        t_us, ours = analyzer_check(folder)
        print(f"| {n} | {t_fr:.1f} s | {t_us:.2f} s | {t_fr / t_us:.1f}x | {fr} | {ours} |", flush=True)
        shutil.rmtree(folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dumps", help="folder of make_dumps.py output (generated when absent)")
    ap.add_argument("--scale", default="64,256,1024")
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--skip-cases", action="store_true")
    ap.add_argument("--corpus", action="store_true", help="only (c): the peer corpus table")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="fr_compare_")
    try:
        if a.corpus:
            corpus_table(work)
            return
        if not a.skip_cases:
            seeded(a.dumps or os.path.join(work, "dumps"), work)
        if a.scale:
            scale(work, [int(x) for x in a.scale.split(",")], a.entries)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
