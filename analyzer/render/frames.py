"""The trace's frames for other tools: parquet (polars, pandas, DuckDB, Spark) and JSON.

`analyzer export TRACE --format parquet -o t.parquet` writes t.parquet (one row per event) and
t.groups.parquet (one row per process group); `--format json` writes one JSON object holding
both. Events keep every column of `Trace.events` in the same order; what changes is only what a
reader outside commtrace cannot resolve: categorical columns become plain strings (no
dictionary to carry around) and atom ids (shapes, splits, info) become JSON text, since their
values are ragged lists and maps of varying keys that no single column type holds
(`pl.col("in_shapes").str.json_decode()` turns them back). `group_label` (mesh dim or group
description) is added so a frame reads without a join.
"""

from __future__ import annotations

import json
import os
from typing import IO

import numpy as np
import polars as pl

from analyzer.model.trace import Trace
from analyzer.render.json import trace_info

ATOM_JSON_COLUMNS = ("in_shapes", "out_shapes", "splits", "info")
"""Columns of atom ids whose values are lists / maps: exported as JSON text (null for none)."""


def atom_json(trace: Trace, column: str) -> pl.Series:
    """Atom ids of `column` as JSON text: one json.dumps per distinct atom, then one gather."""
    lookup = pl.Series([json.dumps(a, separators=(",", ":")) for a in trace.atoms] + [None], dtype=pl.String)
    ids = trace.events[column].to_numpy()
    return lookup.gather(np.where(ids < 0, len(trace.atoms), ids)).alias(column)


def group_labels(trace: Trace, column: str = "group") -> pl.Expr:
    """gid -> its group's label (mesh dim or description); null where the event has no group."""
    g = trace.groups
    return pl.col(column).replace_strict(g["gid"], g["label"], default=None, return_dtype=pl.String)


def events_frame(trace: Trace) -> pl.DataFrame:
    """Every event, every column, readable without commtrace (see the module doc)."""
    atoms = [atom_json(trace, c) for c in ATOM_JSON_COLUMNS if c in trace.events.columns]
    return trace.events.with_columns(pl.col(pl.Categorical).cast(pl.String), *atoms).with_columns(
        group_label=group_labels(trace)
    )


def groups_frame(trace: Trace) -> pl.DataFrame:
    """gid, name (torch's), ranks, desc, label, size."""
    return trace.groups


def groups_path(events_path: str) -> str:
    """t.parquet -> t.groups.parquet (the groups frame sits next to the events)."""
    stem, ext = os.path.splitext(events_path)
    return f"{stem}.groups{ext or '.parquet'}"


def write_parquet(trace: Trace, events_out: IO[bytes], groups_out: IO[bytes]) -> None:
    events_frame(trace).write_parquet(events_out)
    groups_frame(trace).write_parquet(groups_out)


def write_json(trace: Trace, out: IO[str]) -> None:
    """{"trace": header facts, "groups": [...], "events": [...]} with rows as objects. The frames
    serialize themselves (polars), so no Python dict per event is built here."""
    out.write('{"trace": ' + json.dumps(trace_info(trace)) + ',\n"groups": ')
    out.write(groups_frame(trace).write_json())
    out.write(',\n"events": ')
    out.write(events_frame(trace).write_json())
    out.write("}\n")
