"""`analyzer cost` output: rich tables (one trace on one cluster: per rank class, mesh dim x op
x phase; several traces or clusters: side by side) and the JSON for CI. Lays out what
analyzer.cost computed; never queries a trace."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass

import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table

from analyzer.cost.step import StepCost
from analyzer.render.console import _column, human_bytes


@dataclass(kw_only=True, slots=True)
class Run:
    """One trace priced on one cluster."""

    trace: str
    """The trace's path as given."""
    world_size: int
    """Ranks in the trace."""
    cost: StepCost
    """What it costs."""


def ms(seconds: float) -> str:
    """Milliseconds, 3 significant figures."""
    v = seconds * 1e3
    return f"{v:.3g}" if v >= 0.01 or v == 0 else f"{v:.1e}"


SHORT_OPS = (("_into_tensor", ""), ("_tensor", ""), ("_coalesced", "_co"))
SHORT_PHASES = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


def short_op(op: str) -> str:
    """all_gather_into_tensor -> all_gather (the table's column stays narrow; JSON keeps c10d's name)."""
    for long, short in SHORT_OPS:
        op = op.replace(long, short)
    return op


def group_cell(group: str, size: int, nodes: int) -> str:
    """ "tp 8" inside a node, "dp 16/2n" over two nodes."""
    return f"{group} {size}" + (f"/{nodes}n" if nodes > 1 else "")


def console(con: Console, runs: list[Run]) -> None:
    for run in runs:
        c = run.cost
        spec = c.cluster
        con.print(
            f"[bold]{run.trace}[/] on [bold]{spec.name}[/]: {spec.gpus_per_node} GPUs per node, "
            f"{spec.per_node} ranks per node ({-(-run.world_size // spec.per_node)} node(s)); per step, averaged over "
            f"{c.steps} step(s); times in ms"
        )
        if c.table.is_empty():
            con.print("no collectives or p2p recorded: nothing to price")
        elif len(runs) == 1:
            _breakdown(con, c)
    if len(runs) > 1:
        _side_by_side(con, runs)
    con.print(
        "ms: every collective one after another (serial); hidden: of which can overlap with compute "
        "(async ops waited later, FSDP prefetch); model: docs/cost-model.md"
    )


def _breakdown(con: Console, c: StepCost) -> None:
    for cls in c.classes.iter_rows(named=True):
        rows = c.table.filter(pl.col("class") == cls["class"])
        t = Table(
            title=f"rank class {cls['class']}: ranks {cls['ranks_text']} ({len(cls['ranks'])} ranks): "
            f"serial {ms(cls['serial'])}, exposed {ms(cls['exposed'])} ms/step",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            padding=(0, 1, 0, 0),
            pad_edge=False,
        )
        cells = [
            (
                group_cell(r["group"], r["size"], r["nodes"]),
                short_op(r["op"]),
                SHORT_PHASES.get(r["phase"], r["phase"]),
                f"{r['calls']:g}",
                human_bytes(int(r["bytes"])),
                ms(r["seconds"]),
                ms(r["overlappable"]),
            )
            for r in rows.iter_rows(named=True)
        ]
        heads = ("group", "op", "phase", "calls", "bytes", "ms", "hidden")
        for i, name in enumerate(heads):
            _column(t, name, [cell[i] for cell in cells], right=i >= 3, wrap=False)
        for cell in cells:
            t.add_row(*cell)
        con.print(t)


def _side_by_side(con: Console, runs: list[Run]) -> None:
    """One column per (trace, cluster): totals of the class with the most exposed time, then its
    seconds per mesh dim and op."""
    names = [f"{os.path.basename(r.trace)}\n{r.cost.cluster.name}" for r in runs]
    t = Table(
        title="ms per step, the rank class with the most exposed communication",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        pad_edge=False,
    )
    worst = [r.cost.worst for r in runs]
    dims = by_dim(runs)
    rows = [
        ["ranks", *[w["ranks_text"] for w in worst]],
        ["serial", *[ms(w["serial"]) for w in worst]],
        ["exposed", *[ms(w["exposed"]) for w in worst]],
    ]
    for row in dims.iter_rows(named=True):
        rows.append(
            [row["key"], *[ms(row[f"run{i}"]) if row[f"run{i}"] is not None else "-" for i in range(len(runs))]]
        )
    for i, name in enumerate(["per step", *names]):
        _column(t, name, [r[i] for r in rows], right=i > 0, wrap=False)
    for r in rows:
        t.add_row(*r)
    con.print(t)


def by_dim(runs: list[Run]) -> pl.DataFrame:
    """key ("group op"), run0, run1, ...: ms per step of each run's worst class."""
    out = None
    for i, r in enumerate(runs):
        cls = r.cost.worst["class"]
        part = (
            r.cost.table.filter(pl.col("class") == cls)
            .with_columns(pl.col("op").map_elements(short_op, return_dtype=pl.String))
            .group_by(key=pl.format("{} {}", "group", "op"))
            .agg(pl.col("seconds").sum().alias(f"run{i}"))
        )
        out = part if out is None else out.join(part, on="key", how="full", coalesce=True)
    assert out is not None
    return out.sort(pl.max_horizontal(pl.exclude("key")), descending=True)


def to_json(runs: list[Run]) -> dict:
    return {
        "runs": [
            {
                "trace": r.trace,
                "world_size": r.world_size,
                "cluster": {f.name: getattr(r.cost.cluster, f.name) for f in dataclasses.fields(r.cost.cluster)},
                "steps": r.cost.steps,
                "classes": r.cost.classes.with_columns(pl.col("ranks").cast(pl.List(pl.Int64))).to_dicts(),
                "rows": r.cost.table.to_dicts(),
                "per_step": r.cost.per_step.to_dicts(),
            }
            for r in runs
        ],
        "units": {"seconds": "per step", "bytes": "per step and rank", "calls": "per step and rank"},
    }


def print_json(runs: list[Run]) -> None:
    json.dump(to_json(runs), sys.stdout, indent=1)
    sys.stdout.write("\n")
