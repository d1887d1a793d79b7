"""The pipeline rows of bench/run.py: `analyzer check` and `analyzer hang` on synthetic pipeline
traces (bench/synth_pp.py) with seeded faults, each found with its kind and culprit or a MISS."""

from __future__ import annotations

import os

from measure import fits, json_out, roots, run, trace_events


def _pp_shape(quick: bool) -> tuple[int, int, int, int]:
    return (16, 8, 8, 5000) if quick else (16, 128, 8, 5000)  # pp, dp, tp, events per rank


def _pp_faults(dp: int, tp: int) -> dict[str, int]:
    """One rank each: the swap on stage 8, the skipped send on stage 4, the extra all-reduce on stage 2."""
    from synth_pp import layout

    rank = layout(16, dp, tp)[3]
    return {
        "swap": rank(8, dp * 101 // 128, 0),
        "skip_send": rank(4, dp * 113 // 128, 0),
        "extra": rank(2, dp * 119 // 128, 0),
    }


def check(work: str, row, quick: bool, schedule: str) -> None:
    """check on a pipeline trace with every seeded fault: the swap's deadlock_cycle (1F1B only:
    interleaved posts its p2p async, so the swap cannot happen there), the skipped send's
    unmatched_p2p (culprit: the recv left without a send, upstream of the skipping stage), the
    extra all-reduce's missing_collective; ordering verified (no note), nothing else."""
    from synth_pp import generate as pp_generate

    pp, dp, tp, events = _pp_shape(quick)
    faults = _pp_faults(dp, tp)
    if schedule != "1f1b":
        faults.pop("swap")
    path = os.path.join(work, f"pp_{schedule}.trace")
    pp_generate(path, pp, dp, tp, events, schedule, verbose=False, **faults)
    n = trace_events(path)
    r = run("analyzer", "check", path, "--json")
    out = json_out(r)
    found = sorted((f["kind"], tuple(f["culprit_ranks"])) for f in out.get("findings", []))
    want = [("missing_collective", (faults["extra"],)), ("unmatched_p2p", (faults["skip_send"] - dp * tp,))]
    if "swap" in faults:
        want = sorted(want + [("deadlock_cycle", (faults["swap"], faults["swap"] + dp * tp))])
    verified = r.code in (0, 1) and not any("not verified" in note for note in out.get("trace", {}).get("notes", []))
    ok = found == want and verified
    row(
        f"analyzer check, pipeline {schedule} pp{pp} x dp{dp} x tp{tp} "
        f"({pp * dp * tp:,} ranks, {n / 1e6:.0f} M events)",
        f"{r.wall:.1f} s, {r.peak_gib:.2f} GiB",
        "<= 45 s, <= 12 GiB, ordering verified",
        ("seeded faults found, nothing else: " if ok else f"FOUND {found}, WANTED ") + str(want),
        ok and fits(r, 45),
    )
    os.remove(path)


def hang(work: str, row, quick: bool) -> None:
    """hang on a 1F1B trace with a send/recv swap: one deadlock_cycle, on the swapped pair."""
    from synth_pp import generate as pp_generate

    pp, dp, tp, events = _pp_shape(quick)
    swap = _pp_faults(dp, tp)["swap"]
    path = os.path.join(work, "pp_swap.trace")
    pp_generate(path, pp, dp, tp, events, "1f1b", swap=swap, verbose=False)
    r = run("analyzer", "hang", path, "--json")
    cycles = [f for f in json_out(r).get("findings", []) if f["kind"] == "deadlock_cycle"]
    edge = [swap, swap + dp * tp]
    ok = len(cycles) == 1 and cycles[0]["ranks"] == edge and cycles[0].get("p2p_edges") == [edge]
    row(
        f"analyzer hang, 1F1B with a send/recv swap on rank {swap} ({pp * dp * tp:,} ranks x {events:,} events)",
        f"{r.wall:.1f} s, {r.peak_gib:.2f} GiB",
        "<= 45 s, <= 12 GiB, one deadlock_cycle",
        f"cycles: {[(c['ranks'], c.get('p2p_edges')) for c in cycles]}; " + roots(r),
        ok and fits(r, 45),
    )
    os.remove(path)
