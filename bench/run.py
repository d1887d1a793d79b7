"""Every scale goal of commtrace, measured in one run, next to its target and its anchor.

    python bench/run.py            # the full table (~10 min on 2 cores; 82 M-event traces)
    python bench/run.py --quick    # same table at 1/20 of the sizes (a smoke test, ~2 min)

Each command runs in a fresh process as a user would run it (start-up included); peak memory is
that process's own. Synthetic traces come from bench/synth.py with seeded faults, and every row
says whether the tool still found them. The anchors are measured in the same run: the untraced
fake-PG run for the recorder's overhead, torch's fr_trace on the same Flight Recorder dumps.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from measure import run  # noqa: E402
from synth import generate  # noqa: E402

ROWS: list[tuple[str, str, str, str]] = []  # goal, figure, target, anchor / ok


def row(goal: str, figure: str, target: str, note: str = "") -> None:
    ROWS.append((goal, figure, target, note))
    print(f"  {goal}: {figure}   (target {target}) {note}", flush=True)


def recording(work: str, quick: bool) -> None:
    config = os.path.join(HERE, "configs", "fsdp_tp_pp_256.toml")
    out = os.path.join(work, "r256.trace")
    args = ["record", config, "-o", out] + (["--ranks", "0-31"] if quick else [])
    r = run("tracer", *args)
    n_ranks = 32 if quick else 256
    if r.code != 0:
        row(f"record {n_ranks} ranks (pp4 x dp16 x tp4)", f"failed: {r.stderr.strip()[-120:]}", "<= 180 s")
        return
    size = os.path.getsize(out)
    events = _events(out)
    row(
        f"record {n_ranks} ranks of pp4 x dp16 x tp4 (all ranks: 256)",
        f"{r.wall:.1f} s, {events:,} events",
        "<= 180 s",
        "" if not quick else "(quick: 32 ranks)",
    )
    row("size of that recording", f"{size / events:.1f} B/event ({size / 1e6:.1f} MB)", "<= 16 B/event")
    import recorder_overhead

    plain, traced = [], []
    for _ in range(7):  # interleaved, median of 7: single runs swing by ~10 % on a shared box
        plain.append(recorder_overhead.measure("plain", 4, _overhead_args()))
        traced.append(recorder_overhead.measure("traced", 4, _overhead_args()))
    p, t = statistics.median(plain), statistics.median(traced)
    row(
        "recorder overhead (examples/fsdp_tp.py, CPU s, median of 7)",
        f"{100 * (t / p - 1):+.1f} %",
        "<= +5 %",
        f"anchor: untraced {p:.3f} s, recorded {t:.3f} s",
    )


def _overhead_args() -> list[str]:
    return ["--steps", "20", "--dim", "512", "--batch", "64"]


def _events(path: str) -> int:
    from analyzer.load import load

    return load(path).n_events


def analysis(work: str, quick: bool) -> None:
    ranks, events = (4096, 1000) if quick else (16384, 5000)
    n = ranks * events
    checked = os.path.join(work, "check.trace")
    generate(checked, ranks, events, skip=17, dtype_fault=99, verbose=False)
    size = os.path.getsize(checked)
    row(
        f"size, synthetic FSDP x TP trace ({n / 1e6:.0f} M events)",
        f"{size / n:.1f} B/event ({size / 1e6:.0f} MB)",
        "<= 16 B/event",
    )
    r = run("analyzer", "check", checked, "--json")
    found = sorted(
        (f["kind"], tuple(f["culprit_ranks"])) for f in json.loads(r.stdout or '{"findings": []}')["findings"]
    )
    ok = found == [("dtype_mismatch", (99,)), ("missing_collective", (17,))]
    row(
        f"analyzer check, {ranks:,} ranks x {events:,} events",
        f"{r.wall:.1f} s, {r.peak_gib:.2f} GiB",
        "<= 45 s, <= 12 GiB",
        "both seeded faults found, nothing else" if ok else f"FOUND {found}",
    )
    r = run("analyzer", "hang", checked, "--json")
    row(
        f"analyzer hang (dry run, the skip leaves ranks waiting), {n / 1e6:.0f} M events",
        f"{r.wall:.1f} s, {r.peak_gib:.2f} GiB",
        "<= 45 s, <= 12 GiB",
        _roots(r),
    )
    os.remove(checked)
    hung = os.path.join(work, "hang.trace")
    generate(hung, ranks, events, hang=17, verbose=False)
    r = run("analyzer", "hang", hung, "--json")
    row(
        f"analyzer hang (post-mortem: rank 17 died), {n / 1e6:.0f} M events",
        f"{r.wall:.1f} s, {r.peak_gib:.2f} GiB",
        "<= 45 s, <= 12 GiB",
        _roots(r),
    )
    os.remove(hung)
    a, b = os.path.join(work, "a.trace"), os.path.join(work, "b.trace")
    d_ranks, d_events = (4096, 250) if quick else (4096, 5000)
    generate(a, d_ranks, d_events, verbose=False)
    generate(b, d_ranks, d_events, dtype_fault=99, verbose=False)
    r = run("analyzer", "diff", a, b, "--json")
    divs = json.loads(r.stdout)["divergences"] if r.stdout else []
    row(
        f"analyzer diff of two {d_ranks:,}-rank traces ({d_ranks * d_events / 1e6:.0f} M events each)",
        f"{r.wall:.1f} s, {r.peak_gib:.2f} GiB",
        "<= 30 s",
        "the seeded change: " + "; ".join(f"ranks {d['ranks']} at position {d['position_a']}" for d in divs[:2]),
    )


def _roots(r) -> str:
    if not r.stdout:
        return f"error: {r.stderr.strip()[-100:]}"
    out = json.loads(r.stdout)
    return (
        "roots: "
        + "; ".join(f"{f['kind']} {f['culprit_ranks']}" for f in out["findings"][:2])
        + f"; {len(out['stuck_ranks'])} stuck ranks"
    )


def startup() -> None:
    walls = sorted(run("analyzer", "--help").wall for _ in range(5))
    row("analyzer --help", f"{walls[2]:.2f} s (median of 5)", "<= 0.3 s")


def flight_recorder(work: str, quick: bool) -> None:
    import fr_compare
    from fr_synth import generate as fr_generate

    n = 256 if quick else 1024
    folder = os.path.join(work, f"fr_{n}")
    fr_generate(folder, n, 2000)
    t_fr, _ = fr_compare.fr_trace(folder)
    t_us, ours = fr_compare.analyzer_check(folder)
    row(
        f"analyzer check on {n} FR dumps x 2,000 entries",
        f"{t_us:.2f} s ({t_fr / t_us:.1f}x faster)",
        "-",
        f"anchor: torch fr_trace {t_fr:.1f} s; analyzer: {ours}",
    )


def ray_executor(work: str) -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        row("tracer record --executor ray", "skipped: ray not installed", "-")
        return
    prog = os.path.join(REPO, "tests", "programs", "collectives.py")
    local = run("tracer", "record", "--script", prog, "-n", "8", "-o", os.path.join(work, "l.trace"))
    ray_run = run(
        "tracer", "record", "--script", prog, "-n", "8", "--executor", "ray", "-o", os.path.join(work, "r.trace")
    )
    same = run("analyzer", "diff", os.path.join(work, "l.trace"), os.path.join(work, "r.trace")).code == 0
    row(
        "tracer record --executor ray, 8 ranks (local 2-CPU Ray cluster)",
        f"{ray_run.wall:.1f} s",
        "-",
        f"anchor: local pool {local.wall:.1f} s; traces {'equal' if same else 'DIFFER'}",
    )


def torchtitan(work: str) -> None:
    import torchtitan_rows

    torchtitan_rows.rows(work, row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1/20 of the sizes: a smoke test of the harness")
    ap.add_argument("--skip", default="", help="comma list of: record, analysis, startup, fr, ray, torchtitan")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (timings are wall clock)", flush=True)
    with tempfile.TemporaryDirectory(prefix="commtrace-bench-") as work:
        steps = [
            ("record", lambda: recording(work, a.quick)),
            ("analysis", lambda: analysis(work, a.quick)),
            ("startup", startup),
            ("fr", lambda: flight_recorder(work, a.quick)),
            ("ray", lambda: ray_executor(work)),
            ("torchtitan", lambda: torchtitan(work)),
        ]
        for name, step in steps:
            if name not in skip:
                step()
    goldens = sorted(glob.glob(os.path.join(REPO, "traces", "*.trace")))
    sizes = [os.path.getsize(p) / max(1, _events(p)) for p in goldens]
    row(
        "size of the golden traces (2 steps each: headers and atoms dominate)",
        f"{min(sizes):.0f}-{max(sizes):.0f} B/event",
        "-",
    )
    print("\n| goal | measured | target | anchor / check |\n|---|---|---|---|")
    for goal, figure, target, note in ROWS:
        print(f"| {goal} | {figure} | {target} | {note} |")


if __name__ == "__main__":
    main()
