"""Load a trace (or a folder of per-rank parts) into polars frames.

    >>> from analyzer import load
    >>> t = load("fsdp.trace")
    >>> t.events.filter(pl.col("op") == "all_gather_into_tensor").group_by("rank").len()

Columnar all the way: per-rank numpy columns from the format module become one frame; atom
ids of string columns become categoricals through one gather, never a Python loop per event.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from tracer import format as fmt

_POLARS = {"<i4": pl.Int32, "<i8": pl.Int64, "u1": pl.UInt8, "<f8": pl.Float64}
STRING_COLUMNS = ("op", "dtype", "reduce_op", "module", "phase", "frame")


class LoadError(ValueError):
    """Input that cannot be analysed; the message is one line."""


@dataclass
class Trace:
    header: dict
    events: pl.DataFrame
    """One row per event: rank, idx (program order within the rank), then the format's columns;
    string columns decoded, list-valued ones (in_shapes, out_shapes, splits, info) as atom ids."""
    groups: pl.DataFrame
    """gid, name, ranks (list), desc, label (mesh dim name or description), size."""
    atoms: list
    ranks: list[int]
    """Ranks with a stream in this trace."""
    status: dict[int, dict] = field(default_factory=dict)
    """Per rank: n, status ("ok" / "error" / "truncated"), error."""
    notes: list[str] = field(default_factory=list)
    truncated: bool = False

    @property
    def world_size(self) -> int:
        return int(self.header["world_size"])

    @property
    def missing_ranks(self) -> list[int]:
        """Ranks the recording was asked for that left no stream."""
        asked = (self.header.get("config") or {}).get("ranks") or self.header.get("ranks", [])
        return sorted(set(asked) - set(self.ranks))

    def atom(self, aid: int) -> Any:
        return None if aid < 0 else self.atoms[aid]


def group_label(desc: str, name: str) -> str:
    if desc.startswith("mesh_"):
        return desc[len("mesh_"):]
    if desc == "default_pg":
        return "world"
    if desc in ("", "undefined"):
        return f"group {name}"
    return desc


def load(path: str | os.PathLike) -> Trace:
    """A .trace file, a folder of .part files, or OUT.trace whose recording never merged
    (its OUT.trace.parts folder is loaded instead, with a note)."""
    path = os.fspath(path)
    notes: list[str] = []
    if not os.path.exists(path) and os.path.isdir(path + ".parts"):
        notes.append(f"{path} was never written (recording interrupted); loaded {path}.parts")
        path = path + ".parts"
    try:
        if os.path.isdir(path):
            parts = sorted(glob.glob(os.path.join(path, "*.part")) + glob.glob(os.path.join(path, "*.trace")))
            if not parts:
                raise LoadError(f"{path}: folder holds no .part or .trace files")
            data = fmt.combine([fmt.read_trace(p) for p in parts])
        elif os.path.exists(path):
            data = fmt.read_trace(path)
        else:
            raise LoadError(f"{path}: no such file")
    except fmt.TraceFormatError as e:
        raise LoadError(str(e)) from None
    return from_data(data, notes)


def from_data(data: fmt.TraceData, notes: list[str] | None = None) -> Trace:
    notes = list(notes or []) + list(data.notes)
    ranks = sorted(data.columns)
    frames = []
    for rank in ranks:
        cols = data.columns[rank]
        n = len(cols["op"])
        frame = {"rank": np.full(n, rank, dtype=np.int32), "idx": np.arange(n, dtype=np.int32)}
        frame.update(cols)
        frames.append(pl.DataFrame(frame))
    schema = {"rank": pl.Int32, "idx": pl.Int32, **{name: _POLARS[dt] for name, dt in fmt.COLUMNS}}
    events = pl.concat(frames, rechunk=True) if frames else pl.DataFrame(schema=schema)
    events = _decode_strings(events, data.atoms)
    groups = pl.DataFrame(
        {"gid": [g["gid"] for g in data.groups.values()], "name": [g["name"] for g in data.groups.values()],
         "ranks": [g["ranks"] for g in data.groups.values()], "desc": [g["desc"] for g in data.groups.values()]},
        schema={"gid": pl.Int32, "name": pl.String, "ranks": pl.List(pl.Int32), "desc": pl.String})
    labels = [group_label(g["desc"], g["name"]) for g in data.groups.values()]
    groups = groups.with_columns(label=pl.Series(labels, dtype=pl.String), size=pl.col("ranks").list.len().cast(pl.Int32))
    status = {r: dict(e) for r, e in data.ends.items()}
    for r in ranks:
        status.setdefault(r, {"n": len(data.columns[r]["op"]), "status": "truncated", "error": None})
    truncated = data.truncated_at is not None or any(s["status"] == "truncated" for s in status.values())
    trace = Trace(header=data.header, events=events, groups=groups, atoms=data.atoms, ranks=ranks,
                  status=status, notes=notes, truncated=truncated)
    if trace.missing_ranks:
        trace.notes.append(f"missing ranks (no events): {_ranges(trace.missing_ranks)}")
    bad = {r: s for r, s in status.items() if s["status"] != "ok"}
    for r, s in sorted(bad.items()):
        trace.notes.append(f"rank {r}: {s['status']}" + (f": {s['error']}" if s.get("error") else ""))
    return trace


def _decode_strings(events: pl.DataFrame, atoms: list) -> pl.DataFrame:
    """Atom ids -> strings with one gather per column (-1 -> null)."""
    lookup = pl.Series("lookup", [a if isinstance(a, str) else None for a in atoms] + [None], dtype=pl.String)
    lookup = lookup.cast(pl.Categorical)
    n = len(atoms)
    out = []
    for name in STRING_COLUMNS:
        ids = events[name].to_numpy()
        ids = np.where(ids < 0, n, ids)
        out.append(lookup.gather(ids).alias(name))
    return events.with_columns(out)


def _ranges(ranks: list[int]) -> str:
    from analyzer.findings import ranks_text

    return ranks_text(ranks)
