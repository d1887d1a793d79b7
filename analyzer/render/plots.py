"""Matplotlib figures of communication volume, as inline SVG strings for the HTML report.

Imported only on the report's path (matplotlib costs ~0.3 s to import; `analyzer --help` must
stay fast). Figures are built without pyplot (no global figure registry, no GUI backend) and
under a local rc context, so importing this module from a notebook changes nothing there. SVG
text stays text (`svg.fonttype = none`): smaller, sharp at any zoom, searchable in the page;
ids are salted per figure so several SVGs inline in one page never share an id. User text
(mesh dims, frames) is never read as mathtext (a `$` in a frame stays a `$`), and matplotlib's
SVG writer escapes it.
"""

from __future__ import annotations

import io
import re
from typing import Any

import polars as pl

from analyzer.render.console import human_bytes

PHASE_COLOURS = {
    "forward": "#4c78a8",
    "backward": "#f58518",
    "optimizer": "#54a24b",
    "other": "#b8b8b8",
    "unknown": "#9d755d",
}
PHASE_ORDER = ("forward", "backward", "optimizer", "other", "unknown")
SIDE_COLOURS = {"A": "#9aa5b1", "B": "#4c78a8"}
DIM_COLOURS = ("#2a9d8f", "#8e6bbf", "#e9b949", "#d1495b", "#66a182", "#00798c", "#9c6644", "#5c6b73")
"""Mesh dims: unlike the phase colours, so two neighbouring charts never use one colour for two things."""
MAX_BARS = 30
"""Rows of the dim x op chart; the smallest rest are summed into one "other" row."""
RC: Any = {  # matplotlib types rc keys as literals
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.size": 10,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial", "Liberation Sans"],
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "legend.frameon": False,
    "svg.image_inline": True,
}


def figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def to_svg(fig, name: str) -> str:
    """The figure as an <svg> element (no XML prolog, no timestamp), ids salted with `name`."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": f"commtrace-{name}"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "commtrace"})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    # width/height in pt pin the size; a viewBox with a CSS max-width scales it to the page
    return re.sub(r'<svg([^>]*?) width="[\d.]+pt" height="[\d.]+pt"', r'<svg\1 class="plot"', svg, count=1)


def unit_of(largest: float) -> tuple[float, str]:
    """(divisor, name) of the binary unit that shows `largest` as 1..1023: bars are drawn in that
    unit, so the axis ticks land on round numbers of it (1, 2, 4 MiB), not of bytes."""
    for i, name in enumerate(("B", "KiB", "MiB", "GiB", "TiB")):
        if largest < 1024 ** (i + 1) or name == "TiB":
            return float(1024**i), name
    return 1.0, "B"


def _grid(ax, axis: str) -> None:
    ax.grid(axis=axis, color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)


def volume_by_dim_op_phase(volume: pl.DataFrame) -> str | None:
    """Horizontal bars, one per mesh dim x op, split by phase; totals and calls at the bar ends."""
    if volume.is_empty() or volume["bytes"].sum() == 0:
        return None
    import matplotlib

    table = volume.with_columns(row=pl.format("{} · {}", "dim", "op"))
    rows = (
        table.group_by("row")
        .agg(total=pl.col("bytes").sum(), calls=pl.col("calls").sum())
        .sort("total", "row", descending=[True, False])
    )
    keep = rows.head(MAX_BARS)["row"].to_list()
    if rows.height > MAX_BARS:  # the long tail as one bar, so the chart stays readable
        rest = f"{rows.height - MAX_BARS} more dim · op rows"
        table = table.with_columns(row=pl.when(pl.col("row").is_in(keep)).then("row").otherwise(pl.lit(rest)))
        keep.append(rest)
        rows = table.group_by("row").agg(total=pl.col("bytes").sum(), calls=pl.col("calls").sum())
    totals = {r["row"]: r for r in rows.iter_rows(named=True)}
    cell = {
        (r["row"], r["phase"]): r["bytes"]
        for r in table.group_by("row", "phase").agg(pl.col("bytes").sum()).iter_rows(named=True)
    }
    phases = [p for p in PHASE_ORDER if any((row, p) in cell for row in keep)]
    phases += sorted({p for _, p in cell} - set(phases))
    order = keep[::-1]  # largest at the top
    div, unit = unit_of(max(r["total"] for r in totals.values()))
    with matplotlib.rc_context(RC):
        fig = figure(9.5, 1.3 + 0.3 * len(order))
        ax = fig.add_subplot()
        left = [0.0] * len(order)
        for phase in phases:
            widths = [cell.get((row, phase), 0) / div for row in order]
            ax.barh(order, widths, left=left, color=PHASE_COLOURS.get(phase, "#bab0ac"), label=phase, height=0.7)
            left = [a + b for a, b in zip(left, widths)]
        for y, row in enumerate(order):
            ax.annotate(
                f" {human_bytes(totals[row]['total'])} · {totals[row]['calls']:,} calls",
                (left[y], y),
                va="center",
                fontsize=8.5,
                color="#333333",
            )
        ax.set_xlim(0, max(left) * 1.3)
        _grid(ax, "x")
        ax.set_xlabel(f"{unit} (larger buffer side of each call, summed over all ranks)")
        ax.tick_params(axis="y", length=0)
        fig.legend(title="phase", loc="outside upper center", ncols=len(phases))
        return to_svg(fig, "volume")


def time_by_dim_op_phase(cost) -> str | None:
    """Horizontal bars, one per mesh dim x op: milliseconds per step of the rank class with the
    most exposed communication (analyzer.cost), split by phase; the hidden share at the bar ends."""
    if cost is None or cost.table.is_empty():
        return None
    import matplotlib

    worst = cost.worst
    table = cost.table.filter(pl.col("class") == worst["class"]).with_columns(
        row=pl.format("{} · {}", "group", "op"), ms=pl.col("seconds") * 1e3, hidden=pl.col("overlappable") * 1e3
    )
    rows = (
        table.group_by("row")
        .agg(pl.col("ms").sum(), pl.col("hidden").sum())
        .sort("ms", "row", descending=[True, False])
    )
    rows = rows.head(MAX_BARS)
    if rows["ms"].sum() == 0:
        return None
    order = rows["row"].to_list()[::-1]
    cell = {
        (r["row"], r["phase"]): r["ms"]
        for r in table.group_by("row", "phase").agg(pl.col("ms").sum()).iter_rows(named=True)
    }
    phases = [p for p in PHASE_ORDER if any((row, p) in cell for row in order)]
    phases += sorted({p for _, p in cell} - set(phases))
    totals = {r["row"]: r for r in rows.iter_rows(named=True)}
    with matplotlib.rc_context(RC):
        fig = figure(9.5, 1.3 + 0.3 * len(order))
        ax = fig.add_subplot()
        left = [0.0] * len(order)
        for phase in phases:
            widths = [cell.get((row, phase), 0.0) for row in order]
            ax.barh(order, widths, left=left, color=PHASE_COLOURS.get(phase, "#bab0ac"), label=phase, height=0.7)
            left = [a + b for a, b in zip(left, widths)]
        for y, row in enumerate(order):
            t = totals[row]
            ax.annotate(f" {t['ms']:.3g} ms · {t['hidden']:.3g} hidden", (left[y], y), va="center", fontsize=8.5)
        ax.set_xlim(0, max(left) * 1.35)
        _grid(ax, "x")
        ax.set_xlabel(f"ms per step on {cost.cluster.name} (ranks {worst['ranks_text']}; model: docs/cost-model.md)")
        ax.tick_params(axis="y", length=0)
        fig.legend(title="phase", loc="outside upper center", ncols=len(phases))
        return to_svg(fig, "time")


def volume_by_step(per_step: pl.DataFrame) -> str | None:
    """Stacked bars: bytes per training step (optimizer steps done), split by mesh dim."""
    if per_step.is_empty() or per_step["bytes"].sum() == 0:
        return None
    import matplotlib

    steps = sorted(per_step["step"].unique().to_list())
    dims = (
        per_step.group_by("dim")
        .agg(pl.col("bytes").sum())
        .sort("bytes", "dim", descending=[True, False])["dim"]
        .to_list()
    )
    cell = {(r["step"], r["dim"]): r["bytes"] for r in per_step.iter_rows(named=True)}
    div, unit = unit_of(max(sum(cell.get((s, d), 0) for d in dims) for s in steps))
    with matplotlib.rc_context(RC):
        fig = figure(9.5, 3.2)
        ax = fig.add_subplot()
        x = list(range(len(steps)))
        bottom = [0.0] * len(steps)
        for i, dim in enumerate(dims):
            heights = [cell.get((s, dim), 0) / div for s in steps]
            ax.bar(
                x,
                heights,
                bottom=bottom,
                color=DIM_COLOURS[i % len(DIM_COLOURS)],
                label=dim,
                width=0.55 if len(x) > 1 else 0.3,
            )
            bottom = [a + b for a, b in zip(bottom, heights)]
        ax.set_xticks(x, [str(s) for s in steps])
        ax.set_xlabel("step (optimizer steps completed before the op)")
        ax.set_ylabel(unit)
        _grid(ax, "y")
        ax.set_ylim(0, max(bottom) * 1.12)
        ax.legend(title="mesh dim", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        return to_svg(fig, "steps")


def diff_volume_by_dim(volume: pl.DataFrame | None) -> str | None:
    """Grouped bars: bytes per mesh dim in A and in B (from analyzer.compare.diff's volume table)."""
    if volume is None or volume.is_empty():
        return None
    import matplotlib

    per_dim = volume.group_by("dim").agg(pl.col("bytes_a").sum(), pl.col("bytes_b").sum()).sort("dim")
    dims = per_dim["dim"].to_list()
    largest: Any = max(per_dim["bytes_a"].to_list() + per_dim["bytes_b"].to_list(), default=0)
    div, unit = unit_of(largest or 1)
    with matplotlib.rc_context(RC):
        fig = figure(9.5, 1.3 + 0.45 * len(dims))
        ax = fig.add_subplot()
        y = list(range(len(dims)))[::-1]
        for side, offset in (("A", 0.19), ("B", -0.19)):
            values = [v / div for v in per_dim[f"bytes_{side.lower()}"].to_list()]
            ax.barh([v + offset for v in y], values, height=0.36, color=SIDE_COLOURS[side], label=side)
        ax.set_yticks(y, dims)
        ax.tick_params(axis="y", length=0)
        _grid(ax, "x")
        ax.set_xlabel(f"{unit} (summed over all ranks)")
        fig.legend(loc="outside upper center", ncols=2)
        return to_svg(fig, "diff")
