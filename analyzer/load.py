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

from analyzer.findings import ranks_text
from tracer import format as fmt
from tracer import parts as trace_parts

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
    """A .trace file, a folder of .part files, OUT.trace whose recording never merged (its
    OUT.trace.parts folder is loaded instead, with a note), or Flight Recorder dumps (a folder
    or one file, see analyzer.flight_recorder)."""
    path = os.fspath(path)
    notes: list[str] = []
    if not os.path.exists(path) and os.path.isdir(path + ".parts"):
        notes.append(f"{path} was never written (recording interrupted); loaded {path}.parts")
        path = path + ".parts"
    from analyzer.flight_recorder_read import is_dump_path

    if is_dump_path(path):  # PyTorch Flight Recorder dumps, recognised by content
        from analyzer.flight_recorder import load_dumps

        return load_dumps(path)
    try:
        if os.path.isdir(path):
            parts = sorted(glob.glob(os.path.join(path, "*.part")) + glob.glob(os.path.join(path, "*.trace")))
            if not parts:
                raise LoadError(f"{path}: folder holds no .part or .trace files")
            data = trace_parts.combine([fmt.read_trace(p) for p in parts])
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
    counts = [len(data.columns[r]["op"]) for r in ranks]
    cols = {"rank": np.repeat(np.array(ranks, dtype=np.int32), counts),
            "idx": np.concatenate([np.arange(n, dtype=np.int32) for n in counts]) if counts else np.zeros(0, np.int32)}
    for name, dt in fmt.COLUMNS:  # one column at a time, dropping the per-rank pieces as we go
        cols[name] = (np.concatenate([data.columns[r][name] for r in ranks]) if ranks
                      else np.zeros(0, dtype=dt))
        for r in ranks:
            data.columns[r][name] = None
    events = pl.DataFrame(cols)
    del cols
    events = _decode_strings(events, data.atoms)
    groups = pl.DataFrame(
        {"gid": [g["gid"] for g in data.groups.values()], "name": [g["name"] for g in data.groups.values()],
         "ranks": [g["ranks"] for g in data.groups.values()], "desc": [g["desc"] for g in data.groups.values()]},
        schema={"gid": pl.Int32, "name": pl.String, "ranks": pl.List(pl.Int32), "desc": pl.String})
    labels = [group_label(g["desc"], g["name"]) for g in data.groups.values()]
    groups = groups.with_columns(label=pl.Series(labels, dtype=pl.String), size=pl.col("ranks").list.len().cast(pl.Int32))
    status = {r: dict(e) for r, e in data.ends.items()}
    for r, n in zip(ranks, counts):
        status.setdefault(r, {"n": n, "status": "truncated", "error": None})
    truncated = data.truncated_at is not None or any(s["status"] == "truncated" for s in status.values())
    trace = Trace(header=data.header, events=events, groups=groups, atoms=data.atoms, ranks=ranks,
                  status=status, notes=notes, truncated=truncated)
    if trace.missing_ranks:
        trace.notes.append(f"missing ranks (no events): {ranks_text(trace.missing_ranks)}")
    bad: dict[tuple, list[int]] = {}
    for r, s in sorted(status.items()):
        if s["status"] != "ok":
            bad.setdefault((s["status"], s.get("error")), []).append(r)
    for (state, error), rs in bad.items():  # one note per distinct outcome, not per rank
        who = f"rank {rs[0]}" if len(rs) == 1 else f"ranks {ranks_text(rs)}"
        trace.notes.append(f"{who}: {state}" + (f": {error}" if error else ""))
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
