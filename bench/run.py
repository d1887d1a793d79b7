"""Every scale goal of commtrace, measured in one run, next to its target and its anchor.

    python bench/run.py               # the full table (~30 min on 2 cores; 82 M-event traces)
    python bench/run.py --quick       # same table at 1/16 of the sizes (a smoke test)
    python bench/run.py --list        # the steps, one a line
    python bench/run.py --only pp-hang,overhead   # just these steps

Each command runs in a fresh process as a user would run it (start-up included); peak memory is
that process's own. Synthetic traces come from bench/synth.py (FSDP x TP) and bench/synth_pp.py
(pipelines) with seeded faults, and every row says whether the tool still found them; each row
ends with PASS or MISS against its target. The anchors are measured in the same run: the untraced
fake-PG run for the recorder's overhead, torch's fr_trace on the same Flight Recorder dumps.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import pipeline_rows  # noqa: E402
from measure import fits, json_out, roots, run, trace_events  # noqa: E402
from synth import generate  # noqa: E402

ROWS: list[tuple[str, str, str, str, str]] = []  # goal, figure, target, anchor / ok, PASS / MISS


def row(goal: str, figure: str, target: str, note: str = "", ok: bool | None = None) -> None:
    """One table row; `ok` against its target (None: read from a note that starts PASS / MISS)."""
    if ok is None:
        ok = note.startswith("PASS")
        note = note.removeprefix("PASS").removeprefix("MISS").lstrip("; ")
    verdict = "PASS" if ok else "MISS"
    ROWS.append((goal, figure, target, note, verdict))
    print(f"  {goal}: {figure}   (target {target}) {note}  {verdict}", flush=True)


def recording(work: str, quick: bool) -> None:
    config = os.path.join(HERE, "configs", "fsdp_tp_pp_256.toml")
    out = os.path.join(work, "r256.trace")
    args = ["record", config, "-o", out] + (["--ranks", "0-31"] if quick else [])
    r = run("tracer", *args)
    n_ranks = 32 if quick else 256
    if r.code != 0:
        row(f"record {n_ranks} ranks (pp4 x dp16 x tp4)", f"failed: {r.stderr.strip()[-120:]}", "<= 180 s", "", False)
        return
    size = os.path.getsize(out)
    events = trace_events(out)
    row(
        f"record {n_ranks} ranks of pp4 x dp16 x tp4 (all ranks: 256)",
        f"{r.wall:.1f} s, {events:,} events",
        "<= 180 s",
        "" if not quick else "(quick: 32 ranks)",
        r.wall <= 180,
    )
    row(
        "size of that recording",
        f"{size / events:.1f} B/event ({size / 1e6:.1f} MB)",
        "<= 16 B/event",
        "",
        size / events <= 16,
    )


def overhead(quick: bool) -> None:
    """Untraced vs recorded runs of examples/fsdp_tp.py side by side in two warm processes
    (bench/recorder_overhead.py: why, and what each run counts); pairs until the 95 % interval
    is within +-0.8 points, so two runs agree within 2 points (10 minutes at most: under heavy
    load the interval stays wider and the row says so)."""
    import recorder_overhead

    def progress(line: str) -> None:
        print(line, flush=True)

    if quick:
        r = recorder_overhead.measure(half_width=5.0, min_pairs=4, max_pairs=6, own_runs=1, progress=progress)
    else:
        r = recorder_overhead.measure(half_width=0.8, min_pairs=30, max_seconds=600, progress=progress)
    est, lo, hi = r.estimate()
    narrow = hi - lo <= 1.6
    row(
        f"recorder overhead (examples/fsdp_tp.py, CPU s, {len(r.pairs)} lock-step pairs)",
        f"{est:+.1f} % (95 % interval {lo:+.1f} .. {hi:+.1f})",
        "<= +5 %",
        f"untraced {statistics.median(r.base_cpu):.3f} s vs recorded {statistics.median(r.traced_cpu):.3f} s; "
        f"in recorder code (timers, same runs) {r.own_pct():.1f} %"
        + ("" if narrow or quick else "; interval wider than +-0.8: machine too busy"),
        est <= 5,
    )


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
        "",
        size / n <= 16,
    )
    r = run("analyzer", "check", checked, "--json")
    found = sorted((f["kind"], tuple(f["culprit_ranks"])) for f in json_out(r).get("findings", []))
    ok = found == [("dtype_mismatch", (99,)), ("missing_collective", (17,))]
    row(
        f"analyzer check, {ranks:,} ranks x {events:,} events",
        f"{r.wall:.1f} s, {r.peak_gib:.2f} GiB",
        "<= 45 s, <= 12 GiB",
        "both seeded faults found, nothing else" if ok else f"FOUND {found}",
        ok and fits(r, 45),
    )
    r = run("analyzer", "hang", checked, "--json")
    row(
        f"analyzer hang (dry run, the skip leaves ranks waiting), {n / 1e6:.0f} M events",
        f"{r.wall:.1f} s, {r.peak_gib:.2f} GiB",
        "<= 45 s, <= 12 GiB",
        roots(r),
        fits(r, 45) and r.code == 1,
    )
    os.remove(checked)
    hung = os.path.join(work, "hang.trace")
    generate(hung, ranks, events, hang=17, verbose=False)
    r = run("analyzer", "hang", hung, "--json")
    stalled = [f["culprit_ranks"] for f in json_out(r).get("findings", []) if f["kind"] == "stalled_rank"]
    row(
        f"analyzer hang (post-mortem: rank 17 died), {n / 1e6:.0f} M events",
        f"{r.wall:.1f} s, {r.peak_gib:.2f} GiB",
        "<= 45 s, <= 12 GiB",
        roots(r),
        fits(r, 45) and stalled == [[17]],
    )
    os.remove(hung)


def costing(work: str, quick: bool, size: str = "") -> None:
    """analyzer cost against analyzer summary on the same synthetic FSDP x TP trace (the issue's
    goal: within 2x). `size` RANKSxEVENTS overrides the size (82 M events: 16384x5000)."""
    ranks, events = (4096, 1000) if quick else (16384, 5000)
    if size:
        ranks, events = (int(x) for x in size.split("x"))
    path = os.path.join(work, "cost.trace")
    generate(path, ranks, events, verbose=False)
    s = run("analyzer", "summary", path, "--json")
    c = run("analyzer", "cost", path, "--cluster", "h100-dgx", "--json")
    runs = json_out(c).get("runs", [])
    ok = c.code == 0 and len(runs) == 1 and runs[0]["steps"] > 0
    ratio = c.wall / s.wall if s.wall else float("inf")
    row(
        f"analyzer cost vs summary, {ranks:,} ranks x {events:,} events",
        f"cost {c.wall:.1f} s, {c.peak_gib:.2f} GiB; summary {s.wall:.1f} s, {s.peak_gib:.2f} GiB: {ratio:.2f}x",
        "<= 2x summary's time",
        "priced every collective" if ok else f"FAILED (exit {c.code}): {c.stderr.strip()[-200:]}",
        ok and ratio <= 2 and s.code == 0,
    )
    os.remove(path)


def linting(work: str, quick: bool) -> None:
    """analyzer lint (every rule, priced on a cluster) against analyzer summary on the synthetic
    FSDP x TP trace: columnar rules, no loop per event, so within 2x of summary's time."""
    ranks, events = (4096, 1000) if quick else (16384, 5000)
    path = os.path.join(work, "lint.trace")
    generate(path, ranks, events, verbose=False)
    s = run("analyzer", "summary", path, "--json")
    c = run("analyzer", "lint", path, "--cluster", "h100-dgx", "--json")
    ok = c.code == 0 and "findings" in json_out(c)
    ratio = c.wall / s.wall if s.wall else float("inf")
    row(
        f"analyzer lint vs summary, {ranks:,} ranks x {events:,} events",
        f"lint {c.wall:.1f} s, {c.peak_gib:.2f} GiB; summary {s.wall:.1f} s, {s.peak_gib:.2f} GiB: {ratio:.2f}x",
        "<= 2x summary's time",
        f"{len(json_out(c).get('findings', []))} advice"
        if ok
        else f"FAILED (exit {c.code}): {c.stderr.strip()[-200:]}",
        ok and ratio <= 2 and s.code == 0,
    )
    os.remove(path)


def diffing(work: str, quick: bool) -> None:
    a, b = os.path.join(work, "a.trace"), os.path.join(work, "b.trace")
    d_ranks, d_events = (4096, 250) if quick else (4096, 5000)
    generate(a, d_ranks, d_events, verbose=False)
    generate(b, d_ranks, d_events, dtype_fault=99, verbose=False)
    r = run("analyzer", "diff", a, b, "--json")
    divs = json_out(r).get("divergences", [])
    row(
        f"analyzer diff of two {d_ranks:,}-rank traces ({d_ranks * d_events / 1e6:.0f} M events each)",
        f"{r.wall:.1f} s, {r.peak_gib:.2f} GiB",
        "<= 30 s",
        "the seeded change: " + "; ".join(f"ranks {d['ranks']} at position {d['position_a']}" for d in divs[:2]),
        r.wall <= 30 and any(99 in d["ranks"] for d in divs),
    )


def startup() -> None:
    walls = sorted(run("analyzer", "--help").wall for _ in range(5))
    row("analyzer --help", f"{walls[2]:.2f} s (median of 5)", "<= 0.3 s", "", walls[2] <= 0.3)


def flight_recorder(work: str, quick: bool) -> None:
    import fr_rows

    fr_rows.rows(work, row, quick)


def flight_recorder_scale(work: str, quick: bool) -> None:
    """Issue 39: hang at 4k / 16k ranks vs a plain unpickle, and at 1,024 ranks vs fr_trace."""
    import fr_scale_rows

    fr_scale_rows.versus_unpickle(work, row, [256, 1024] if quick else [4096, 16384])
    fr_scale_rows.versus_fr_trace(work, row, quick)


def flight_recorder_ray(quick: bool) -> None:
    """Issue 39: a 100k-rank hang (simulated dumps) decoded and reduced on Ray workers."""
    try:
        import ray  # noqa: F401
    except ImportError:
        row("hang on 100,000 simulated FR dumps on Ray", "skipped: ray not installed", "driver <= 2 GiB", "", False)
        return
    import fr_ray_rows

    fr_ray_rows.rows(row, 6_250 if quick else 100_000)


def ray_executor(work: str) -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        row("tracer record --executor ray", "skipped: ray not installed", "same trace as the local pool", "", False)
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
        "same trace as the local pool",
        f"anchor: local pool {local.wall:.1f} s; traces {'equal' if same else 'DIFFER'}",
        same,
    )


def torchtitan(work: str) -> None:
    import torchtitan_rows

    torchtitan_rows.rows(work, row)


def torchtitan_preset(work: str, quick: bool, step: str) -> None:
    import torchtitan_presets

    torchtitan_presets.preset(work, row, quick, step)


def golden_sizes() -> None:
    goldens = sorted(glob.glob(os.path.join(REPO, "traces", "*.trace")))
    sizes = [os.path.getsize(p) / max(1, trace_events(p)) for p in goldens]
    row(
        "size of the golden traces (2 steps each: headers and atoms dominate)",
        f"{min(sizes):.0f}-{max(sizes):.0f} B/event",
        "<= 64 B/event",
        "",
        max(sizes) <= 64,
    )


def numerics_cost(work: str) -> None:
    """--numerics on the hsdp_tp example (8 ranks, local mode) against the same recording
    without it: the digests of every module output, input gradient and parameter per step."""
    config = os.path.join(REPO, "examples", "hsdp_tp.toml")
    walls = {}
    for name, extra in (("plain", []), ("numerics", ["--numerics"])):
        out = os.path.join(work, f"hsdp_tp_{name}.trace")
        r = run("tracer", "record", config, "--mode", "local", "-o", out, *extra)
        if r.code != 0:
            row(f"record hsdp_tp --mode local {' '.join(extra)}", f"failed: {r.stderr.strip()[-120:]}", "", "", False)
            return
        walls[name] = r.wall
    ratio = walls["numerics"] / walls["plain"]
    row(
        "record hsdp_tp (8 ranks) --mode local --numerics vs without",
        f"{walls['numerics']:.1f} s vs {walls['plain']:.1f} s: {ratio:.2f}x",
        "<= 2x",
        "",
        ratio <= 2.0,
    )


def steps(work: str, quick: bool) -> dict:
    """Every step of the table by name (--list, --only), in the order they run."""
    return {
        "record": lambda: recording(work, quick),
        "overhead": lambda: overhead(quick),
        "analysis": lambda: analysis(work, quick),
        "diff": lambda: diffing(work, quick),
        "cost": lambda: costing(work, quick, os.environ.get("COMMTRACE_COST_SIZE", "")),
        "lint": lambda: linting(work, quick),
        "pp-check-1f1b": lambda: pipeline_rows.check(work, row, quick, "1f1b"),
        "pp-check-interleaved": lambda: pipeline_rows.check(work, row, quick, "interleaved"),
        "pp-hang": lambda: pipeline_rows.hang(work, row, quick),
        "startup": startup,
        "fr": lambda: flight_recorder(work, quick),
        "fr-scale": lambda: flight_recorder_scale(work, quick),
        "fr-ray": lambda: flight_recorder_ray(quick),
        "ray": lambda: ray_executor(work),
        "torchtitan": lambda: torchtitan(work),
        "tt-70b": lambda: torchtitan_preset(work, quick, "tt-70b"),
        "tt-405b": lambda: torchtitan_preset(work, quick, "tt-405b"),
        "goldens": golden_sizes,
        "numerics": lambda: numerics_cost(work),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller traces: a smoke test of the harness")
    ap.add_argument("--list", action="store_true", help="print the steps and exit")
    ap.add_argument("--only", default="", help="comma list of steps to run (see --list)")
    ap.add_argument("--skip", default="", help="comma list of steps not to run")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="commtrace-bench-") as work:
        table = steps(work, a.quick)
        if a.list:
            print("\n".join(table))
            return
        only = [x for x in a.only.split(",") if x]
        unknown = [x for x in only + a.skip.split(",") if x and x not in table]
        if unknown:
            ap.error(f"unknown step {', '.join(unknown)}: one of {', '.join(table)}")
        skip = set(filter(None, a.skip.split(",")))
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (timings are wall clock)", flush=True)
        for name, step in table.items():
            if (not only or name in only) and name not in skip:
                step()
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    print("\n| goal | measured | target | anchor / check | |\n|---|---|---|---|---|")
    for goal, figure, target, note, verdict in ROWS:
        print(f"| {goal} | {figure} | {target} | {note} | {verdict} |")


if __name__ == "__main__":
    main()
