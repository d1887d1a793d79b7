"""The analyzer's view of a trace: polars frames (`Trace`), built from decoded trace data by
`from_data` whatever the input (a source in analyzer/sources/ reads the input; analyzer.loader
picks the source).

    >>> from analyzer import load
    >>> t = load("fsdp.trace")
    >>> t.events.filter(pl.col("op") == "all_gather_into_tensor").group_by("rank").len()

Columnar all the way, and pattern-coded like the format: each rank's distinct event patterns
(op, group, shapes, module, frame, ...) go to one small `patterns` frame, and per event only a
pattern code, seq, step, batch and ts to the `stream` frame (82 M events: ~3 GB, not ~9 GB).
`Trace.select` gathers the pattern columns a pass needs by code; atom ids of string columns
become categoricals on the pattern table only. Never a Python loop per event.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from analyzer.model.atoms import validate as validate_atoms
from analyzer.model.numerics import frames as numerics_frames
from analyzer.model.text import ranks_text
from traceformat import codec
from traceformat import format as fmt

STRING_COLUMNS = ("op", "dtype", "reduce_op", "module", "phase", "frame", "user_frame")


SOURCE_COLUMNS: dict[str, tuple[Any, str]] = {
    "state": (
        pl.String,
        'Flight Recorder: "scheduled" / "started" / "completed" as FR knew it at dump time '
        "(gloo never updates an entry: there, completed when its group's last_completed_collective is past it)",
    ),
    "record_id": (pl.Int64, "Flight Recorder: the entry's record id (its position in the ring buffer's history)"),
    "fr_seq": (pl.Int64, "Flight Recorder: the entry's collective_seq_id (from 1, per group; 0 on p2p)"),
    "fr_p2p_seq": (pl.Int64, "Flight Recorder: the entry's p2p_seq_id (from 1; 0 on collectives)"),
}
"""Optional per-event stream columns, (dtype, meaning) by name: a source gives them or not
(`Trace.has`); one not declared here is refused."""


class LoadError(ValueError):
    """Input that cannot be analysed; the message is one line."""


@dataclass
class Trace:
    header: dict
    patterns: pl.DataFrame
    """Distinct event patterns, one row per (rank, pattern): code, rank, then every column of the
    format except the per-event ones (string columns decoded; list-valued ones such as in_shapes,
    out_shapes, splits, info as atom ids; parent / ref as events back, -1 none)."""
    stream: pl.DataFrame
    """One row per event: rank, idx (program order within the rank), code (row of `patterns`),
    seq, step, batch, ts, plus the SOURCE_COLUMNS its source gives (Flight Recorder: state,
    record_id)."""
    groups: pl.DataFrame
    """gid, name, ranks (list), desc, label (mesh dim name or description), size."""
    atoms: list
    ranks: list[int]
    """Ranks with a stream in this trace."""
    status: dict[int, dict] = field(default_factory=dict)
    """Per rank: n, status ("ok" / "error" / "truncated"), error."""
    notes: list[str] = field(default_factory=list)
    truncated: bool = False
    numerics: pl.DataFrame | None = None
    """Digests of values per step (`--numerics` recordings; analyzer.model.numerics), None without."""
    replicas: pl.DataFrame | None = None
    """Per-rank digests of values declared replicated (analyzer.model.numerics), None without."""
    _events: pl.DataFrame | None = field(default=None, repr=False)

    def has(self, column: str) -> bool:
        """Whether the trace's source gave this optional stream column (SOURCE_COLUMNS)."""
        return column in self.stream.columns

    @property
    def mode(self) -> fmt.Mode | None:
        """How the trace was made (None: a mode this version does not know)."""
        return fmt.Mode.of(self.header.get("mode"))

    @property
    def world_size(self) -> int:
        return int(self.header["world_size"])

    @property
    def n_events(self) -> int:
        return self.stream.height

    @property
    def events(self) -> pl.DataFrame:
        """Every event with every column (rank, idx, then the format's columns): built once on
        first use. At scale, `select` only what a pass needs instead."""
        if self._events is None:
            self._events = self.select()
        return self._events

    def select(self, *columns: str, ops=None, ranks: list[int] | None = None) -> pl.DataFrame:
        """Events (all, or those whose op is in `ops`, of `ranks`) with the named columns
        (default: all), in stream order. Pattern columns are gathered by code: no join."""
        extra = [c for c in self.stream.columns if c not in _STREAM_BASE]
        names = list(columns) or ["rank", "idx", *fmt.COLUMN_NAMES, *extra]
        s = self.stream if ranks is None else self.stream.filter(pl.col("rank").is_in(list(ranks)))
        if ops is not None:
            s = self.with_codes(s, self.patterns.filter(pl.col("op").cast(pl.String).is_in(list(ops))))
        return self.with_patterns(s, *[n for n in names if n not in s.columns]).select(names)

    @staticmethod
    def with_codes(frame: pl.DataFrame, table: pl.DataFrame) -> pl.DataFrame:
        """Rows of `frame` whose pattern is one of `table`'s (a filtered patterns frame)."""
        return frame.filter(pl.col("code").is_in(table["code"].implode()))

    def with_patterns(self, frame: pl.DataFrame, *columns: str, table: pl.DataFrame | None = None) -> pl.DataFrame:
        """`frame` (with a code column) plus the named columns of the pattern table, or of a
        table derived from it (keyed by code, e.g. per-pattern tokens): a gather, not a join."""
        if table is None:
            table = self.patterns
        elif table.height != self.patterns.height or not table["code"].equals(self.patterns["code"]):
            table = self.patterns.select("code").join(
                table.select("code", *columns), on="code", how="left", maintain_order="left"
            )
        code = frame["code"]
        out = []
        for name in columns:
            col = table[name].gather(code)
            out.append(_back(frame["idx"], col, name) if name in codec.BACK_COLUMNS else col)
        return frame.with_columns(out) if out else frame

    def subset(self, ranks: list[int]) -> Trace:
        """The same trace with only these ranks' streams (e.g. to export a slice of a big job)."""
        keep = sorted(set(ranks) & set(self.ranks))
        return dataclasses.replace(
            self,
            stream=self.stream.filter(pl.col("rank").is_in(keep)),
            ranks=keep,
            status={r: s for r, s in self.status.items() if r in keep},
            notes=list(self.notes),
            _events=None,
        )

    @property
    def missing_ranks(self) -> list[int]:
        """Ranks the recording was asked for that left no stream."""
        config = self.header.get("config")
        asked = (config.get("ranks") if isinstance(config, dict) else None) or self.header.get("ranks") or []
        asked = asked if isinstance(asked, list) else []  # a header is untrusted input: ints only
        return sorted({r for r in asked if type(r) is int and 0 <= r < self.world_size} - set(self.ranks))

    def atom(self, aid: int) -> Any:
        """The atom `aid`; None for -1 (and for an id past the table: a corrupt trace)."""
        return self.atoms[aid] if 0 <= aid < len(self.atoms) else None


_STREAM_BASE = ("rank", "idx", "code", *codec.STREAM_COLUMNS)


def _back(idx: pl.Series, back: pl.Series, name: str) -> pl.Series:
    return pl.Series(name, codec.events_back(idx.to_numpy(), back.to_numpy()).astype(np.int32))


def group_label(desc: str, name: str, mesh_dim: str | None = None) -> str:
    """The one name of a group everywhere (checks, summary, diff keys, exports): its mesh dim,
    "world" for the default group unless a 1-D mesh reuses it (`mesh_dim`: then that dim's name,
    as `analyzer diff` compares it), or torch's creation-order name."""
    if desc.startswith("mesh_"):
        return desc[len("mesh_") :]
    if desc == "default_pg":
        return mesh_dim or "world"
    if desc in ("", "undefined"):
        return f"group {name}"
    return desc


def one_dim_meshes(patterns: pl.DataFrame, atoms: list) -> dict[tuple, str]:
    """Members -> dim name of every 1-D (sub)mesh the trace saw (from the mesh events' info):
    torch hands such a mesh the default group when it spans the world."""
    ids = patterns.filter(pl.col("op") == "mesh")["info"].unique().to_list()
    out: dict[tuple[int, ...], str] = {}
    for aid in ids:
        info = atoms[aid] if 0 <= aid < len(atoms) else None  # checked at load (analyzer/model/atoms.py)
        if isinstance(info, dict) and len(info.get("dims", [])) == 1:
            members = _flat(info.get("ranks", []))
            if members:
                out.setdefault(tuple(sorted(members)), info["dims"][0])
    return out


def _flat(x) -> list:
    return [y for v in x for y in _flat(v)] if isinstance(x, list) else [x]


def from_data(data: fmt.TraceData, notes: list[str] | None = None, columns: dict | None = None) -> Trace:
    """The frames of decoded trace data; `columns`: values of SOURCE_COLUMNS per event, in rank
    then program order."""
    notes = list(notes or []) + list(data.notes)
    ranks = sorted(data.columns)
    patterns, stream, n_of = _frames(data, ranks)
    patterns, malformed = validate_atoms(patterns, data.atoms)  # readers trust these atoms from here on
    notes += malformed
    for name, values in (columns or {}).items():
        if name not in SOURCE_COLUMNS:
            raise ValueError(f"stream column {name!r} is not declared in SOURCE_COLUMNS")
        stream = stream.with_columns(pl.Series(name, values, dtype=SOURCE_COLUMNS[name][0]))
    groups = pl.DataFrame(
        {
            "gid": [g["gid"] for g in data.groups.values()],
            "name": [g["name"] for g in data.groups.values()],
            "ranks": [g["ranks"] for g in data.groups.values()],
            "desc": [g["desc"] for g in data.groups.values()],
        },
        schema={"gid": pl.Int32, "name": pl.String, "ranks": pl.List(pl.Int32), "desc": pl.String},
    )
    meshes = one_dim_meshes(patterns, data.atoms)
    labels = [group_label(g["desc"], g["name"], meshes.get(tuple(sorted(g["ranks"])))) for g in data.groups.values()]
    groups = groups.with_columns(
        label=pl.Series(labels, dtype=pl.String), size=pl.col("ranks").list.len().cast(pl.Int32)
    )
    status = {r: dict(e) for r, e in data.ends.items()}
    for r in ranks:
        status.setdefault(r, {"n": n_of.get(r, 0), "status": "truncated", "error": None})
    for r, s in _header_status(data.header).items():  # the recorder's word on ranks stopped from outside
        if status.get(r, {}).get("status") in (None, "truncated"):
            status[r] = {"n": n_of.get(r, 0), "status": s["status"], "error": s.get("why")}
            if s.get("stack"):
                status[r].update(stack=s["stack"], at=s.get("at") or "")
    truncated = data.truncated_at is not None or any(s["status"] not in ("ok", "error") for s in status.values())
    trace = Trace(
        header=data.header,
        patterns=patterns,
        stream=stream,
        groups=groups,
        atoms=data.atoms,
        ranks=ranks,
        status=status,
        notes=notes,
        truncated=truncated,
    )
    if data.numerics:
        trace.numerics, trace.replicas = numerics_frames(data.numerics)
    if trace.missing_ranks:
        trace.notes.append(f"missing ranks (no events): {ranks_text(trace.missing_ranks)}")
    cut = set()  # in a file that ends early, a rank with no stream is known only to be past the cut
    if data.truncated_at is not None:
        cut = {r for r in trace.missing_ranks if r not in status}
        status.update({r: {"n": 0, "status": "truncated", "error": None} for r in cut})
    bad: dict[tuple, list[int]] = {}
    for r, s in sorted(status.items()):
        if s["status"] != "ok" and r not in cut:  # those have the note above
            bad.setdefault((s["status"], s.get("error")), []).append(r)
    for (state, error), rs in bad.items():  # one note per distinct outcome, not per rank
        who = f"rank {rs[0]}" if len(rs) == 1 else f"ranks {ranks_text(rs)}"
        trace.notes.append(f"{who}: {state}" + (f": {error}" if error else ""))
    return trace


def _header_status(header: dict) -> dict[int, dict]:
    """The header's `rank_status` (rank -> status, why), kept where it is well-formed: the header
    is input like any other."""
    given = header.get("rank_status")
    world = header.get("world_size", 0)
    if not isinstance(given, dict):
        return {}
    return {
        r: {
            "status": s["status"],
            "why": s.get("why") if isinstance(s.get("why"), str) else None,
            # where a stopped rank's Python was (the recorder's, from faulthandler): text lines
            "stack": [x for x in s["stack"] if isinstance(x, str)] if isinstance(s.get("stack"), list) else [],
            "at": s.get("at") if isinstance(s.get("at"), str) else "",
        }
        for r, s in given.items()
        if type(r) is int and 0 <= r < world and isinstance(s, dict) and isinstance(s.get("status"), str)
    }


def _frames(data: fmt.TraceData, ranks: list[int]) -> tuple[pl.DataFrame, pl.DataFrame, dict[int, int]]:
    """Per-rank pattern tables -> one patterns frame (global codes); per-rank streams -> one
    stream frame. A merged trace's streams were decoded into the reader's arena in rank order:
    its buffers become the frame's columns as they are. Otherwise one concatenate per column."""
    per = [codec.split(data.columns[r], fmt.COLUMNS) for r in ranks]
    for r in ranks:
        data.columns[r] = None
    k = np.array([len(p.patterns["op"]) for p in per], dtype=np.int64)
    n = np.array([len(p.stream["code"]) for p in per], dtype=np.int64)
    k_at = np.r_[0, np.cumsum(k)]
    for p, offset in zip(per, k_at[:-1].tolist()):  # rank-local pattern codes -> global
        p.stream["code"] = p.stream["code"].astype(np.int32, copy=False)
        p.stream["code"] += offset
    dtypes = fmt.DTYPES
    pat = {
        name: np.concatenate([p.patterns[name] for p in per]).astype(dtypes[name], copy=False)
        if per
        else np.zeros(0, dtypes[name])
        for name in fmt.PATTERN_COLUMNS
    }
    rank_arr = np.array(ranks, dtype=np.int32)
    patterns = pl.DataFrame({"code": np.arange(int(k_at[-1]), dtype=np.int32), "rank": np.repeat(rank_arr, k), **pat})
    total = int(n.sum())
    idx = np.arange(total, dtype=np.int32)
    idx -= _per_row(np.r_[0, np.cumsum(n)][:-1], n, total)
    in_arena = bool(per) and [p.piece for p in per] == data.arena.pieces
    if in_arena:
        for p in per:
            p.stream.clear()  # views into the arena: let its buffers go column by column below
    st = [pl.Series("rank", _per_row(rank_arr, n, total)), pl.Series("idx", idx)]
    for name in ("code", *codec.STREAM_COLUMNS):
        dtype = np.int32 if name == "code" else dtypes[name]
        if in_arena:  # one column at a time into one chunk (polars would copy a chunked frame
            # whole on its first group-by), each arena buffer freed right after: peak + 1 column
            st.append(pl.concat([pl.Series(name, x) for x in data.arena.columns(name)]).rechunk())
            data.arena.drop(name)
        else:
            pieces = [p.stream.pop(name) for p in per] or [np.zeros(0, dtype)]
            st.append(pl.Series(name, np.concatenate(pieces).astype(dtype, copy=False)))
    del per
    return _decode_strings(patterns, data.atoms), pl.DataFrame(st), dict(zip(ranks, n.tolist()))


def _per_row(per_rank: np.ndarray, n: np.ndarray, total: int) -> np.ndarray:
    """Each row's rank-level value (int32) for ranks of n rows each, in order: one cumsum over
    steps placed at rank boundaries (np.repeat is ~10x slower at 82 M rows)."""
    out = np.zeros(total, dtype=np.int32)
    keep = n > 0
    values = np.asarray(per_rank, dtype=np.int64)[keep]
    starts = np.r_[0, np.cumsum(n)][:-1][keep]
    out[starts] = np.diff(np.r_[0, values])
    return np.cumsum(out, out=out)


def _decode_strings(patterns: pl.DataFrame, atoms: list) -> pl.DataFrame:
    """Atom ids -> strings with one gather per column (-1 -> null)."""
    lookup = pl.Series("lookup", [a if isinstance(a, str) else None for a in atoms] + [None], dtype=pl.String)
    lookup = lookup.cast(pl.Categorical)
    n = len(atoms)
    out = []
    for name in STRING_COLUMNS:
        ids = patterns[name].to_numpy()
        ids = np.where(ids < 0, n, ids)
        out.append(lookup.gather(ids).alias(name))
    return patterns.with_columns(out).with_columns(frame=where_issued(pl.col("user_frame"), pl.col("frame")))


def where_issued(user: pl.Expr, issued: pl.Expr) -> pl.Expr:
    """The analyzer's `frame`: the user's line first, then the library line that issued the op
    (`train.py:40 in main via accelerate/utils/operations.py:355 in _gpu_gather_one`); one of them
    where they are the same line or the trace names no user frame (v2.1 and older, Flight
    Recorder dumps, a library's own thread). Every finding, report and diff shows it as it is;
    the trace's own columns stay apart: `user_frame` here, the issuing line in the file."""
    user, issued = user.cast(pl.String), issued.cast(pl.String)
    both = user.is_not_null() & issued.is_not_null() & (user != issued)
    return pl.when(both).then(user + fmt.FRAME_VIA + issued).otherwise(issued.fill_null(user)).cast(pl.Categorical)
