"""Typed validation of the atoms that analysis passes read as structured values, once, when a
trace is loaded (analyzer/model/trace.py from_data, whatever the source), so every reader can trust
them instead of re-checking where it uses them.

A trace is input like any other: an atom may hold anything msgpack can. Per atom kind, what a
user would expect of a malformed one:

- a mesh event's info (`dims`, `ranks`, `shape`): only names the group a 1-D mesh reuses
  and shows in reports; the mesh event itself still happened. Set to none (-1) on those events:
  the rest of the trace analyses as before.
- an all_to_all splits atom (two lists of split sizes): what `check` verifies between peers.
  Set to none (-1), so those calls are not verified (as for a call recorded without splits)
  rather than verified against garbage; every other check still runs.

Either way one note says how many were set to none and why. Work is per distinct atom id (a few
per trace), then one column replacement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

_INT64 = 1 << 63


def _ints(x: Any, low: int = -_INT64) -> bool:
    return isinstance(x, list) and all(type(v) is int and low <= v < _INT64 for v in x)


def _nested_ints(x: Any) -> bool:
    """A list of ints, or of such lists (a mesh's members as its tensor.tolist())."""
    return isinstance(x, list) and all((type(v) is int and -_INT64 <= v < _INT64) or _nested_ints(v) for v in x)


def valid_mesh_info(info: Any) -> bool:
    """A dict whose `dims` are names, `ranks` (nested) ints and `shape` ints, where present."""
    if not isinstance(info, dict):
        return False
    dims, ranks, shape = info.get("dims", []), info.get("ranks", []), info.get("shape", [])
    return isinstance(dims, list) and all(isinstance(d, str) for d in dims) and _nested_ints(ranks) and _ints(shape)


def valid_splits(value: Any) -> bool:
    """[input_split_sizes, output_split_sizes]: two lists of non-negative ints."""
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(_ints(side, low=0) for side in value)


RULES: tuple[tuple[str, str | None, str, Callable[[Any], bool]], ...] = (
    ("info", "mesh", "mesh info", valid_mesh_info),
    ("splits", None, "all_to_all splits", valid_splits),
)
"""(column, op whose atoms it is, or None: every event's, what it is in the note, validator)."""


def validate(patterns: pl.DataFrame, atoms: list) -> tuple[pl.DataFrame, list[str]]:
    """The pattern table with each malformed atom id of RULES set to -1, and the note saying so."""
    found = []
    for column, op, what, valid in RULES:
        rows = patterns if op is None else patterns.filter(pl.col("op") == op)
        ids = [i for i in rows[column].unique().to_list() if i is not None and i >= 0]
        bad = [i for i in ids if i >= len(atoms) or not valid(atoms[i])]
        if not bad:
            continue
        hit = pl.col(column).is_in(bad)
        if op is not None:
            hit = hit & (pl.col("op") == op)
        patterns = patterns.with_columns(pl.when(hit).then(-1).otherwise(pl.col(column)).cast(pl.Int32).alias(column))
        found.append(f"{len(bad)} {what} atom{'s' if len(bad) != 1 else ''}")
    if not found:
        return patterns, []
    return patterns, [f"malformed atoms read as none (not verified): {', '.join(found)}"]
