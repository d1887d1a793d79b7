"""Make docs/report.png, the README's picture of `analyzer report`.

    python scripts/screenshot_report.py [-o docs/report.png] [--html out/screenshot.html]

Starts from the golden recording of examples/hsdp_tp.toml (traces/hsdp_tp.trace: the reference
Llama on 8 ranks, HSDP 2 x 2 with TP 2, two steps; no torch needed) and seeds a deadlock into
it the way one is written by hand: in step 1's backward, rank 3 syncs one gradient over
dp_replicate (its last all-reduce there) before the reduce-scatter and all-reduce of the layer
before it, which its peers run first. Rank 3 and its replicate peer 7 then wait on each other
in different all-reduces of the same group (a cycle), and the other ranks wait on them. That
trace goes to out/, `analyzer report` of it (diffed against the golden) to --html, and headless
Chromium (scripts/headless_chromium.py) screenshots the page down to the plots (the diff and
summary tables below them are left out to keep the PNG small).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import polars as pl

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = "traces/hsdp_tp.trace"
SEEDED = "out/hsdp_tp_seeded_deadlock.trace"
RANK = 3
LIST_COLUMNS = ("in_shapes", "out_shapes", "splits", "info")
"""Columns of atom ids that the trace writer wants as values."""


def rank_events(trace, rank: int) -> list[dict]:
    """`rank`'s events as the trace writer takes them: format columns, atoms as values."""
    from traceformat.format import COLUMN_NAMES

    rows = trace.events.filter(pl.col("rank") == rank).sort("idx").iter_rows(named=True)
    out = []
    for row in rows:
        ev = {name: row[name] for name in COLUMN_NAMES}
        ev.update({name: trace.atom(row[name]) for name in LIST_COLUMNS})
        out.append(ev)
    return out


def move_before(events: list[dict], idx: int, before: int) -> list[dict]:
    """Event `idx` moved to just before event `before`; waits' refs and redistributions'
    parents (event indexes) renumbered to the new order."""
    order = list(range(len(events)))
    order.remove(idx)
    order.insert(order.index(before), idx)
    new_of = {old: new for new, old in enumerate(order)}
    moved = [dict(events[old]) for old in order]
    for ev in moved:
        for col in ("ref", "parent"):
            if ev[col] >= 0:
                ev[col] = new_of[ev[col]]
    return moved


def seed(golden, out: str) -> None:
    """Write the golden with rank RANK's last dp_replicate all-reduce of step 1 (the gradient sync
    of tok_embeddings) moved up before the reduce-scatter and all-reduce of layers.0: rank RANK
    then waits in all-reduce #n on dp_replicate while its replicate peer waits in #n-1."""
    from traceformat.format import make_header
    from traceformat.parts import write_all

    mine = rank_events(golden, RANK)
    label = dict(golden.groups.select("gid", "label").iter_rows())
    blocking = [i for i, e in enumerate(mine) if e["step"] == 1 and e["phase"] == "backward" and not e["async_op"]]
    syncs = [i for i in blocking if mine[i]["op"] == "all_reduce" and label.get(mine[i]["group"]) == "dp_replicate"]
    scatter = [
        i
        for i in blocking
        if mine[i]["op"] == "reduce_scatter_tensor" and label.get(mine[i]["group"]) == "dp_shard" and i < syncs[-2]
    ][-1]
    events = {r: rank_events(golden, r) for r in golden.ranks}
    events[RANK] = move_before(mine, syncs[-1], scatter)
    h = golden.header
    header = make_header(
        world_size=h["world_size"],
        ranks=golden.ranks,
        mode=h["mode"],
        config=h.get("config"),
        torch_version=h.get("torch") or "",
    )
    groups = [dict(g, ranks=list(g["ranks"])) for g in golden.groups.select("gid", "name", "ranks", "desc").to_dicts()]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    write_all(out, header, events, groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default="docs/report.png")
    parser.add_argument("--html", default="out/screenshot.html")
    parser.add_argument("--until", default="#plot-steps", help="Keep the page down to this element (CSS selector).")
    args = parser.parse_args()
    os.chdir(REPO)  # the report names its traces as given: repository-relative

    from analyzer.loader import load

    sys.path.insert(0, os.path.join(REPO, "scripts"))
    from headless_chromium import Chromium

    seed(load(GOLDEN), SEEDED)
    # the real command, as a user runs it
    report = subprocess.run(
        [sys.executable, "-m", "analyzer.cli", "report", SEEDED, "--diff", GOLDEN, "-o", args.html],
        capture_output=True,
        text=True,
    )
    if report.returncode != 0:
        sys.exit(f"analyzer report failed: {report.stderr.strip()}")
    with Chromium() as browser:
        page = browser.open(args.html)
        if page.errors:
            sys.exit(f"the report has errors in Chromium: {page.errors}")
        width, height = page.screenshot(args.output, width=1280, until=args.until, max_height=4000)
    print(
        f"{report.stdout.strip()}\nwrote {args.output} ({width}x{height}, {os.path.getsize(args.output) // 1024} KiB)"
    )


if __name__ == "__main__":
    main()
