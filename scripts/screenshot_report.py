"""Make docs/report.png, the README's picture of `analyzer report`.

    python scripts/screenshot_report.py [-o docs/report.png] [--html out/screenshot.html]

Starts from the golden recording of examples/hsdp_tp.toml (traces/hsdp_tp.trace: the reference
Llama on 8 ranks, HSDP 2 x 2 with TP 2, two steps; no torch needed) and seeds a deadlock into
it the way one is written by hand: in step 1's backward, rank 3 syncs one gradient over
dp_replicate (its last all-reduce there) before the reduce-scatter and all-reduce of the layer
before it, which its peers run first. Rank 3 and its replicate peer 7 then wait on each other
in different all-reduces of the same group (a cycle), and the other ranks wait on them. The report
of that trace, diffed against the golden, is written to --html and screenshot by headless
Chromium (scripts/headless_chromium.py) down to the plots (the diff and summary tables below
are left out of the picture to keep the PNG small).
"""

from __future__ import annotations

import argparse
import os
import sys

import polars as pl

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(REPO, "traces", "hsdp_tp.trace")
RANK = 3


def move_before(events: pl.DataFrame, rank: int, idx: int, before: int) -> pl.DataFrame:
    """`rank`'s event `idx` moved to just before its event `before`; idx renumbered 0..n-1 in the
    new order and the waits' refs (and redistributions' parents) renumbered with them."""
    key = pl.when((pl.col("rank") == rank) & (pl.col("idx") == idx)).then(pl.lit(before - 0.5)).otherwise(
        pl.col("idx").cast(pl.Float64))
    moved = (events.with_columns(order=key).sort("rank", "order")
             .with_columns(new=pl.int_range(pl.len(), dtype=pl.Int32).over("rank")))
    renumber = moved.select("rank", old="idx", new="new")
    for col in ("ref", "parent"):
        moved = (moved.join(renumber.rename({"old": col, "new": f"{col}_new"}), on=["rank", col], how="left")
                 .with_columns(pl.col(f"{col}_new").fill_null(-1).alias(col)).drop(f"{col}_new"))
    return moved.sort("rank", "new").with_columns(idx="new").drop("order", "new")


def seeded(golden):
    """The golden trace with rank RANK's last dp_replicate all-reduce of step 1 (the gradient sync
    of tok_embeddings) moved up before the layers.0 dp_shard reduce-scatter and its all-reduce:
    rank RANK then waits in all-reduce #n on dp_replicate while its replicate peer waits in #n-1."""
    import copy

    ev = golden.events.join(golden.groups.select("gid", "label"), left_on="group", right_on="gid", how="left")
    mine = ev.filter((pl.col("rank") == RANK) & (pl.col("step") == 1) & (pl.col("async_op") == 0)
                     & (pl.col("phase") == "backward")).sort("idx")
    syncs = mine.filter((pl.col("op") == "all_reduce") & (pl.col("label") == "dp_replicate"))["idx"].to_list()
    scatter = mine.filter((pl.col("op") == "reduce_scatter_tensor") & (pl.col("label") == "dp_shard")
                          & (pl.col("idx") < syncs[-2]))["idx"].to_list()[-1]
    trace = copy.copy(golden)
    trace.events = move_before(golden.events, RANK, syncs[-1], scatter)
    trace.notes = list(golden.notes)
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=os.path.join(REPO, "docs", "report.png"))
    parser.add_argument("--html", default=os.path.join(REPO, "out", "screenshot.html"))
    parser.add_argument("--until", default="#plot-steps", help="Keep the page down to this element (CSS selector).")
    args = parser.parse_args()

    from analyzer.load import load
    from analyzer.render.html import render
    from analyzer.report import ReportInputs, build_report

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from headless_chromium import Chromium

    golden = load(GOLDEN)
    trace = seeded(golden)
    name = f"hsdp_tp.trace with rank {RANK}'s last dp_replicate all-reduce moved up"
    report = build_report(trace, ReportInputs(source=name, other=golden, other_source="traces/hsdp_tp.trace"))
    os.makedirs(os.path.dirname(os.path.abspath(args.html)), exist_ok=True)
    with open(args.html, "w", encoding="utf-8") as f:
        f.write(render(report))
    with Chromium() as browser:
        page = browser.open(args.html)
        if page.errors:
            sys.exit(f"the report has errors in Chromium: {page.errors}")
        width, height = page.screenshot(args.output, width=1280, until=args.until, max_height=4000)
    print(f"wrote {args.html} and {args.output} ({width}x{height}, {os.path.getsize(args.output) // 1024} KiB): "
          f"{len(report.findings)} findings, {len(report.hang.stuck) if report.hang else 0} ranks stuck")


if __name__ == "__main__":
    main()
