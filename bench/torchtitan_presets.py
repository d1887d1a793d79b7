"""Bench rows for TorchTitan v0.2.2's shipped llama3 presets (tests/torchtitan/torchtitan_v0.2.2/), recorded
unchanged at their own degrees as a user would: `tracer record llama3_70b.toml -n 64` (dp 8 x
tp 8, the 70B flavor's shapes, 2 steps, fake compute picked by --compute auto).

Targets (issue #20): the whole recording in <= 3 min, and <= 2 GiB peak resident memory per rank
process. The preset's ranks are identical up to a mesh translation: tracer record shares the
recording (tracer/record/sharing.py: 3 of 64 ranks recorded, 61 derived, verified on 2); the row
says how many ranks were recorded and derived and whether verification passed.
The rank processes are the fork server's children, which the bench cannot wait4 on:
each reports its own high-water mark (VmHWM) and `tracer record` prints the largest
("peak memory per recording process: max X GiB (rank R), ..."), read here. --quick records ranks
0-7 only (the time target is then not comparable; the memory one is).
"""

from __future__ import annotations

import os
import re

from measure import REPO_TESTS, run

PRESETS = {"tt-70b": ("llama3_70b.toml", 64), "tt-405b": ("llama3_405b.toml", 128)}
"""bench step -> (shipped TOML, the world size its degrees are written for)."""
SECONDS, GIB = 180.0, 2.0
SHARED = re.compile(
    r"note: (recorded \d+ of \d+ ranks, derived \d+) by relabelling ranks? [0-9, ]+ \(verified on (ranks? [0-9, ]+)\)"
)
"""tracer record's sharing line (tracer/record/sharing.py): what was recorded, derived and verified."""
PEAK = re.compile(r"peak memory per recording process: max ([0-9.]+) GiB \(rank (\d+)\), median ([0-9.]+) GiB")


def preset(work: str, row, quick: bool, step: str) -> None:
    toml, n = PRESETS[step]
    path = os.path.join(REPO_TESTS, "torchtitan_v0.2.2", toml)
    ranks = ["--ranks", "0-7"] if quick else []
    goal = f"tracer record {toml} -n {n}" + (" --ranks 0-7 (quick)" if quick else "")
    target = f"<= {SECONDS:.0f} s, <= {GIB:g} GiB per rank process"
    load = os.getloadavg()[0]
    r = run("tracer", "record", path, "-n", str(n), *ranks, "-o", os.path.join(work, f"{step}.trace"))
    lines = r.stderr.strip().splitlines()
    if r.code != 0:
        row(goal, f"failed (exit {r.code}): {lines[-1][:200] if lines else ''}", target, f"load {load:.1f}", False)
        return
    m = PEAK.search(r.stderr)
    if m is None:
        row(goal, f"{r.wall:.0f} s, no per-rank peak reported", target, f"load {load:.1f}", False)
        return
    peak, events = float(m.group(1)), next((x for x in lines if x.startswith("recorded ")), "")
    shared = SHARED.search(r.stderr)
    failed = next((x for x in lines if x.startswith("note: rank sharing")), "")
    sharing = (
        f"{shared.group(1)}, verification passed on {shared.group(2)}"
        if shared and not failed
        else failed[6:160] or "every rank recorded (no sharing)"
    )
    row(
        goal,
        f"{r.wall:.0f} s, peak {peak:.2f} GiB per rank process (rank {m.group(2)}; median {m.group(3)} GiB); {sharing}",
        target,
        f"load {load:.1f} at start, {os.getloadavg()[0]:.1f} at end; {events.split(' in ')[0]}; "
        f"the tracer process itself {r.peak_gib:.2f} GiB",
        (quick or r.wall <= SECONDS) and peak <= GIB,
    )
