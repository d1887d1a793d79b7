"""The commtrace trace format, v2: the records and their layout constants. With
traceformat/writer.py (appending records), traceformat/reader.py (decoding) and
traceformat/codec.py (a block's column packings), the only code that knows the bytes.

Torch-free on purpose: the analyzer imports this module and must start without torch.
See docs/trace-format.md for the layout. In short, a trace is a stream of msgpack
maps, each with a type key "t":

    header   once, first: format name, version, world size, ranks, mode, config, columns
    atoms    interned values (strings, shapes, dicts) appended to the atom table
    group    one process group of the group table: gid, torch name, member ranks, desc
    ev       one event of one rank as a row (streamed while recording, flushed per event)
    pblock   many events of one rank: a table of distinct patterns plus, per event, a pattern
             code, seq, step, batch and timestamp, each column packed (traceformat/codec.py)
    block    (v1) many events of one rank as plain little-endian column arrays
    numerics digests of tensor values per step (local mode --numerics; traceformat/numerics.py)
    end      a rank finished: its event count, status ("ok" / "error") and error line
    footer   once, last: the file is complete

A recorder writes rows so that a crash loses nothing; `merge` rewrites rows into pblocks,
which numpy reads without a Python loop per event. v1 files (plain blocks) are still read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import msgpack
import numpy as np

from traceformat import codec

FORMAT_NAME = "commtrace"
VERSION = (2, 2)
BLOCK_EVENTS = 65536

# (name, numpy dtype). Atom columns hold ids into the atom table; -1 means "none".
COLUMNS: tuple[tuple[str, str], ...] = (
    ("op", "<i4"),  # atom: op name ("all_reduce", "send", "new_group", "redistribute", ...)
    ("group", "<i4"),  # gid into the group table
    ("seq", "<i8"),  # per-group sequence number (collectives), per (group, src, dst) for p2p
    ("peer", "<i4"),  # global rank: root of a rooted collective, peer of a p2p op
    ("tag", "<i4"),  # p2p tag
    ("dtype", "<i4"),  # atom: "float32", ...
    ("in_shapes", "<i4"),  # atom: list of input shapes (one per tensor)
    ("out_shapes", "<i4"),  # atom: list of output shapes
    ("in_bytes", "<i8"),
    ("out_bytes", "<i8"),
    ("reduce_op", "<i4"),  # atom: "sum", "max", ...
    ("async_op", "u1"),  # 1 when the caller gets a Work / async tensor back
    ("splits", "<i4"),  # atom: [input_split_sizes, output_split_sizes] for all_to_all
    ("info", "<i4"),  # atom: op-specific map (mesh, placements, group api, ...)
    ("module", "<i4"),  # atom: module FQN the op ran under
    ("phase", "<i4"),  # atom: "forward" / "backward" / "optimizer" / "other"
    ("step", "<i4"),  # optimizer steps completed before this event
    ("frame", "<i4"),  # atom: the innermost frame outside torch / commtrace / stdlib (a library's, or the program's)
    ("user_frame", "<i4"),  # atom (v2.2): the innermost frame of the program's own code, -1 none
    ("parent", "<i4"),  # event index (same rank) of the redistribute that issued it
    ("ref", "<i4"),  # wait: event index (same rank) of the op it waits on
    ("batch", "<i4"),  # id of the coalesced / batch_isend_irecv batch, per rank
    ("ts", "<f8"),  # seconds since the rank started recording (not deterministic)
)
COLUMN_NAMES = tuple(name for name, _ in COLUMNS)
DTYPES = dict(COLUMNS)
ATOM_COLUMNS = (
    "op",
    "dtype",
    "in_shapes",
    "out_shapes",
    "reduce_op",
    "splits",
    "info",
    "module",
    "phase",
    "frame",
    "user_frame",
)
FRAME_VIA = " via "
"""How a frame is spelled where the user's line led to a library's: `train.py:40 in main via
accelerate/utils/operations.py:355 in _gpu_gather_one` (the analyzer's frames, a rank's error)."""
ADDED_COLUMNS = {"user_frame": (2, 2)}
"""Columns added by a minor version, with that version: a file of an older minor version has
none of them, and reads with each holding its default (-1: none) on every event."""
INT_COLUMNS = tuple(name for name in COLUMN_NAMES if name != "ts")
# pblock layout: the pattern table's columns (a matrix, in this order) and the per-event columns
PATTERN_COLUMNS = tuple(name for name in COLUMN_NAMES if name not in codec.STREAM_COLUMNS)
PATTERN_ATOM_AT = [PATTERN_COLUMNS.index(name) for name in ATOM_COLUMNS]
PATTERN_GROUP_AT = PATTERN_COLUMNS.index("group")
PBLOCK_STREAM = ("code",) + codec.STREAM_COLUMNS
_NONE_ROW = {name: (0.0 if dt == "<f8" else -1) for name, dt in COLUMNS}
_NONE_ROW.update(async_op=0, step=0, seq=-1)
_NONE_LIST = [_NONE_ROW[name] for name in COLUMN_NAMES]
COLUMN_DEFAULTS: dict[str, Any] = dict(_NONE_ROW)
"""Column name -> the value an event holds where nothing was set (-1 for ids, atoms, indices)."""
COLUMN_AT = {name: i for i, name in enumerate(COLUMN_NAMES)}
"""Column name -> its index in a row (a recorder fills rows by index)."""


class TraceFormatError(ValueError):
    """The bytes are not a commtrace trace this reader understands (one-line message)."""


def default_row(**values: Any) -> list:
    """A row in COLUMNS order with defaults for what the caller does not set (names that are not
    columns are ignored). The recorder fills empty_row() by index instead (its hot path)."""
    row = empty_row()
    at = COLUMN_AT
    for name, value in values.items():
        i = at.get(name)
        if i is not None:
            row[i] = value
    return row


def empty_row() -> list:
    """A row in COLUMNS order holding every column's default."""
    return _NONE_LIST.copy()


class Mode(str, Enum):
    """How a trace was made: the header's `mode`."""

    FAKE = "fake"
    """A process per rank on the recording fake backend (a dry run: never blocks)."""
    LOCAL = "local"
    """Every rank in one process under LocalTensorMode (a dry run: never blocks)."""
    REAL = "real"
    """A process per rank on a real gloo backend (tracer record --mode real): real values; a rank
    that waits for a peer blocks, so a hung run's streams end where ranks were stuck."""
    REPLAY = "replay"
    """Re-issued on a real backend (tracer replay): a hung replay's streams end where ranks were stuck."""
    FLIGHT_RECORDER = "flight_recorder"
    """Imported PyTorch Flight Recorder dumps (post-mortem)."""

    @property
    def dry_run(self) -> bool:
        """Recorded without blocking: streams run past where a real job would hang."""
        return self in (Mode.FAKE, Mode.LOCAL)

    @classmethod
    def of(cls, value) -> Mode | None:
        """The mode a header names, None for one this version does not know."""
        try:
            return cls(value)
        except ValueError:
            return None


def make_header(
    *,
    world_size: int,
    ranks: list[int],
    mode: str,
    config: dict | None = None,
    torch_version: str = "",
    created: str = "",
    part: bool = False,
) -> dict:
    return {
        "t": "header",
        "format": FORMAT_NAME,
        "version": list(VERSION),
        "world_size": world_size,
        "ranks": sorted(ranks),
        "mode": mode,
        "config": config or {},
        "torch": torch_version,
        "created": created,
        "part": part,
        "columns": [list(c) for c in COLUMNS],
    }


def atom_key(value: Any) -> Any:
    """Interning key of an atom: strings and tuples as they are (no packing on the hot path),
    anything else (lists, maps) by its msgpack bytes."""
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return (tuple, value)
    return (type(value), msgpack.packb(value))


class AtomTable:
    """Interned values and their ids, in first-seen order (a writer's table, or one for many
    parts combined in memory)."""

    def __init__(self):
        self.values: list = []
        self._ids: dict[Any, int] = {}

    def intern(self, value: Any) -> int:
        key = atom_key(value)
        aid = self._ids.get(key)
        if aid is None:
            aid = self._ids[key] = len(self.values)
            self.values.append(value)
        return aid

    def find(self, value: Any) -> int:
        """Id of an interned value, -1 when there is none (without adding it)."""
        return self._ids.get(atom_key(value), -1)


@dataclass
class TraceData:
    """Everything a trace (or a part) holds, decoded. `columns[rank]` maps each of COLUMNS to a
    numpy array (a codec.RankColumns when read: pattern table + stream, expanded on access)."""

    header: dict
    atoms: list = field(default_factory=list)
    groups: dict[int, dict] = field(default_factory=dict)
    columns: dict[int, Any] = field(default_factory=dict)
    """Per rank: {column: array} (a codec.RankColumns when read; None once a loader took it)."""
    ends: dict[int, dict] = field(default_factory=dict)
    numerics: list[dict] = field(default_factory=list)
    """Numerics records in file order (traceformat/numerics.py), each as written."""
    rank_numerics: list[dict] = field(default_factory=list)
    """A real-mode part's own digests (numerics.RANK_RECORD), combined into `numerics` at merge."""
    complete: bool = False  # footer seen
    truncated_at: int | None = None  # byte offset where decoding stopped early
    notes: list[str] = field(default_factory=list)
    arena: Arena = field(default_factory=lambda: Arena(), repr=False)
    """Where the per-event columns of pattern blocks were decoded (see Arena)."""
    known_gids: tuple[int, np.ndarray] | None = field(default=None, repr=False)
    """(groups seen, lookup by gid + 1) for validating blocks while reading."""

    @property
    def ranks(self) -> list[int]:
        return sorted(set(self.header.get("ranks", [])) | set(self.columns))


class Arena:
    """The per-event columns of many blocks, decoded in file order into a few big buffers
    instead of one small array per block: a loader can hand the buffers to a dataframe as they
    are (no per-rank pieces to concatenate, no second copy of 82 M events in memory)."""

    CHUNK = 1 << 22

    def __init__(self):
        self.chunks: list[dict[str, np.ndarray]] = []
        self.used: list[int] = []
        self.pieces: list[tuple[int, int, int]] = []
        """(chunk, start, stop) of every block, in the order they were taken."""

    def take(self, n: int) -> tuple[tuple[int, int, int], dict[str, np.ndarray]]:
        if not self.chunks or self.used[-1] + n > len(self.chunks[-1]["code"]):
            size = max(self.CHUNK, n)
            self.chunks.append(
                {name: np.empty(size, dtype=np.int32 if name == "code" else DTYPES[name]) for name in PBLOCK_STREAM}
            )
            self.used.append(0)
        c, start = len(self.chunks) - 1, self.used[-1]
        self.used[-1] = start + n
        self.pieces.append((c, start, start + n))
        return self.pieces[-1], {name: col[start : start + n] for name, col in self.chunks[c].items()}

    def columns(self, name: str) -> list[np.ndarray]:
        """The buffers of one column, each cut to what was used."""
        return [chunk[name][:used] for chunk, used in zip(self.chunks, self.used)]

    def drop(self, name: str) -> None:
        """Release one column's buffers (once nothing else holds a view of them)."""
        for chunk in self.chunks:
            chunk.pop(name, None)
