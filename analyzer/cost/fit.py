"""The presets against the published figures they are calibrated to: predicted vs published
bus bandwidth per message size (the table in docs/cost-model.md; tests/analyze/test_cost_fit.py)."""

from __future__ import annotations

import polars as pl

from analyzer.cost.cluster import PRESETS
from analyzer.cost.model import busbw
from analyzer.cost.published import CURVES


def fit_table() -> pl.DataFrame:
    """preset, op, ranks, nodes, size (bytes), published, predicted (GB/s busbw), error
    (predicted / published - 1)."""
    rows = []
    for c in CURVES:
        cluster = PRESETS[c.preset]
        for size, published in zip(c.sizes, c.busbw):
            predicted = busbw(c.op, size, c.ranks, cluster, nodes=c.nodes)
            rows.append((c.preset, c.op, c.ranks, c.nodes, size, published, predicted))
    schema = ["preset", "op", "ranks", "nodes", "size", "published", "predicted"]
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    return frame.with_columns(error=pl.col("predicted") / pl.col("published") - 1)


def markdown() -> str:
    """The fit as a markdown table, one row per size, one column pair per curve."""
    t = fit_table()
    lines = []
    for (preset, op, ranks, nodes), part in t.group_by("preset", "op", "ranks", "nodes", maintain_order=True):
        lines.append(f"\n{preset}: {op}, {ranks} ranks on {nodes} node(s)\n")
        lines.append("| size | published busbw GB/s | predicted GB/s | error |")
        lines.append("|---:|---:|---:|---:|")
        for r in part.iter_rows(named=True):
            lines.append(f"| {_size(r['size'])} | {r['published']:.1f} | {r['predicted']:.1f} | {r['error']:+.0%} |")
    return "\n".join(lines)


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


if __name__ == "__main__":
    print(markdown())
