"""The commtrace trace format, v2: the one place that knows the bytes (with tracer/codec.py,
which packs the columns of a block).

Torch-free on purpose: the analyzer imports this module and must start without torch.
See docs/trace-format.md for the layout. In short, a trace is a stream of msgpack
maps, each with a type key "t":

    header   once, first: format name, version, world size, ranks, mode, config, columns
    atoms    interned values (strings, shapes, dicts) appended to the atom table
    group    one process group of the group table: gid, torch name, member ranks, desc
    ev       one event of one rank as a row (streamed while recording, flushed per event)
    pblock   many events of one rank: a table of distinct patterns plus, per event, a pattern
             code, seq, step, batch and timestamp, each column packed (tracer/codec.py)
    block    (v1) many events of one rank as plain little-endian column arrays
    end      a rank finished: its event count, status ("ok" / "error") and error line
    footer   once, last: the file is complete

A recorder writes rows so that a crash loses nothing; `merge` rewrites rows into pblocks,
which numpy reads without a Python loop per event. v1 files (plain blocks) are still read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from tracer import codec

FORMAT_NAME = "commtrace"
VERSION = (2, 0)
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
    ("frame", "<i4"),  # atom: first user frame "file:line in function"
    ("parent", "<i4"),  # event index (same rank) of the redistribute that issued it
    ("ref", "<i4"),  # wait: event index (same rank) of the op it waits on
    ("batch", "<i4"),  # id of the coalesced / batch_isend_irecv batch, per rank
    ("ts", "<f8"),  # seconds since the rank started recording (not deterministic)
)
COLUMN_NAMES = tuple(name for name, _ in COLUMNS)
PATTERN_COLUMNS = tuple(name for name in COLUMN_NAMES if name not in codec.STREAM_COLUMNS)
_STREAM = ("code",) + codec.STREAM_COLUMNS
_DTYPES = dict(COLUMNS)
ATOM_COLUMNS = ("op", "dtype", "in_shapes", "out_shapes", "reduce_op", "splits", "info", "module", "phase", "frame")
_ATOM_AT = [PATTERN_COLUMNS.index(name) for name in ATOM_COLUMNS]
_GROUP_AT = PATTERN_COLUMNS.index("group")
_INT_COLUMNS = tuple(name for name in COLUMN_NAMES if name != "ts")
_NONE_ROW = {name: (0.0 if dt == "<f8" else -1) for name, dt in COLUMNS}
_NONE_ROW.update(async_op=0, step=0, seq=-1)


class TraceFormatError(ValueError):
    """The bytes are not a commtrace trace this reader understands (one-line message)."""


def default_row(**values: Any) -> list:
    """A row in COLUMNS order with defaults for what the caller does not set."""
    row = dict(_NONE_ROW)
    row.update(values)
    return [row[name] for name in COLUMN_NAMES]


def make_header(*, world_size: int, ranks: list[int], mode: str, config: dict | None = None,
                torch_version: str = "", created: str = "", part: bool = False) -> dict:
    return {
        "t": "header", "format": FORMAT_NAME, "version": list(VERSION), "world_size": world_size,
        "ranks": sorted(ranks), "mode": mode, "config": config or {}, "torch": torch_version,
        "created": created, "part": part, "columns": [list(c) for c in COLUMNS],
    }


def atom_key(value: Any) -> Any:
    """Interning key of an atom: strings and tuples as they are (no packing on the hot path),
    anything else (lists, maps) by its msgpack bytes."""
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return (tuple, value)
    return (type(value), msgpack.packb(value))


class TraceWriter:
    """Appends records to a trace. Each record is one write(), so a killed process leaves
    every record it finished and at most one partial record at the tail."""

    def __init__(self, path: str | os.PathLike, header: dict):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._atoms: dict[Any, int] = {}
        self._pending: list = []
        self._packer = msgpack.Packer(use_bin_type=True)
        self._write(dict(header, version=list(VERSION)))  # what this writer writes, whatever was read

    def _write(self, record: dict) -> None:
        data = self._packer.pack(record)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def atom(self, value: Any) -> int:
        """Intern a msgpack-able value; returns its id. None is -1."""
        if value is None:
            return -1
        key = atom_key(value)
        aid = self._atoms.get(key)
        if aid is None:
            aid = self._atoms[key] = len(self._atoms)
            self._pending.append(value)
        return aid

    def _flush_atoms(self) -> None:
        if self._pending:
            base = len(self._atoms) - len(self._pending)
            self._write({"t": "atoms", "base": base, "v": self._pending})
            self._pending = []

    def group(self, gid: int, name: str, ranks: list[int], desc: str) -> None:
        self._write({"t": "group", "gid": gid, "name": name, "ranks": list(ranks), "desc": desc})

    def row(self, rank: int, values: list) -> None:
        self._flush_atoms()
        self._write({"t": "ev", "r": rank, "v": values})

    def block(self, rank: int, columns) -> None:
        """Events of one rank as pattern-coded blocks of up to BLOCK_EVENTS events."""
        self._flush_atoms()
        n = len(columns["op"])
        for start in range(0, n, BLOCK_EVENTS):
            stop = min(n, start + BLOCK_EVENTS)
            chunk = columns if (start, stop) == (0, n) else {k: columns[k][start:stop] for k in COLUMN_NAMES}
            rc = codec.split(chunk, COLUMNS)
            stream = dict(rc.stream, ts=np.round(rc.stream["ts"] * codec.TS_TICKS))
            self._write({"t": "pblock", "r": rank, "n": stop - start, "k": len(rc.patterns["op"]),
                         "p": codec.encode_table([rc.patterns[name] for name in PATTERN_COLUMNS]),
                         "s": [codec.encode(stream[name]) for name in _STREAM]})

    def end(self, rank: int, n_events: int, status: str = "ok", error: str | None = None) -> None:
        self._flush_atoms()
        self._write({"t": "end", "r": rank, "n": n_events, "status": status, "error": error})

    def footer(self) -> None:
        self._flush_atoms()
        self._write({"t": "footer"})

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass
class TraceData:
    """Everything a trace (or a part) holds, decoded. `columns[rank]` maps each of COLUMNS to a
    numpy array (a codec.RankColumns when read: pattern table + stream, expanded on access)."""

    header: dict
    atoms: list = field(default_factory=list)
    groups: dict[int, dict] = field(default_factory=dict)
    columns: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    ends: dict[int, dict] = field(default_factory=dict)
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


def _check_header(rec: Any, source: str) -> dict:
    if not isinstance(rec, dict) or rec.get("t") != "header" or rec.get("format") != FORMAT_NAME:
        raise TraceFormatError(f"{source}: not a commtrace trace (no commtrace header)")
    version = rec.get("version")
    if not (isinstance(version, list) and len(version) == 2 and all(isinstance(v, int) for v in version)):
        raise TraceFormatError(f"{source}: corrupt header (version)")
    if version[0] > VERSION[0]:
        raise TraceFormatError(
            f"{source}: trace format v{version[0]}.{version[1]} is newer than this reader "
            f"(v{VERSION[0]}.{VERSION[1]}); upgrade commtrace")
    if not isinstance(rec.get("world_size"), int) or rec["world_size"] <= 0:
        raise TraceFormatError(f"{source}: corrupt header (world_size)")
    columns = rec.get("columns")
    if not isinstance(columns, list) or [tuple(c) for c in columns if isinstance(c, list)][:len(COLUMNS)] != list(COLUMNS):
        raise TraceFormatError(f"{source}: unsupported column layout")
    return rec


def read_trace(path: str | os.PathLike) -> TraceData:
    """Decode a trace or part file. A truncated file yields every complete record before the
    cut and sets `truncated_at`; anything that is not a trace raises TraceFormatError."""
    source = os.fspath(path)
    try:
        f = open(source, "rb")
    except IsADirectoryError:
        raise TraceFormatError(f"{source}: is a folder, not a trace file") from None
    except OSError as e:
        raise TraceFormatError(f"{source}: cannot read ({e.strerror})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if not size:
            raise TraceFormatError(f"{source}: empty file")
        # streamed: the file is never held in memory twice (bins become the column buffers)
        limit = min(max(size, 1 << 20), 1 << 31)
        unpacker = msgpack.Unpacker(f, raw=False, strict_map_key=False, read_size=min(1 << 24, limit),
                                    max_buffer_size=limit)
        trace: TraceData | None = None
        rows: dict[int, list] = {}
        blocks: dict[int, list] = {}
        offset = 0
        try:
            for rec in unpacker:
                if trace is None:
                    trace = TraceData(header=_check_header(rec, source))
                else:
                    _apply(trace, rec, rows, blocks)
                offset = unpacker.tell()
        except TraceFormatError:
            raise
        except Exception as e:  # msgpack raises several types on corrupt bytes
            if trace is None:
                raise TraceFormatError(f"{source}: not a commtrace trace ({type(e).__name__})") from None
            trace.notes.append(f"corrupt record at byte {offset}: {type(e).__name__}; kept what came before")
            trace.truncated_at = offset
    if trace is None:
        raise TraceFormatError(f"{source}: not a commtrace trace (truncated header)")
    if trace.truncated_at is None and offset < size:
        trace.truncated_at = offset
    if not trace.complete and trace.truncated_at is None:
        trace.truncated_at = offset
    if trace.truncated_at is not None:
        trace.notes.append(f"{os.path.basename(source)}: truncated at byte {trace.truncated_at} of {size}")
    _assemble(trace, rows, blocks)
    return trace


def _apply(trace: TraceData, rec: Any, rows: dict, blocks: dict) -> None:
    if not isinstance(rec, dict):
        raise TraceFormatError("record is not a map")
    kind = rec.get("t")
    if kind == "ev":
        values = rec["v"]
        if not isinstance(values, list) or len(values) != len(COLUMNS):
            raise TraceFormatError("event row of wrong width")
        rows.setdefault(int(rec["r"]), []).append(values)
    elif kind == "block":
        n, cols = int(rec["n"]), rec["c"]
        if len(cols) != len(COLUMNS):
            raise TraceFormatError("block of wrong width")
        arrays = {name: np.frombuffer(buf, dtype=dt) for (name, dt), buf in zip(COLUMNS, cols)}
        if any(len(a) != n for a in arrays.values()):
            raise TraceFormatError("block column of wrong length")
        blocks.setdefault(int(rec["r"]), []).append(arrays)
    elif kind == "pblock":
        block = _decode_pblock(trace, rec)  # before setdefault: a corrupt block leaves no empty entry
        blocks.setdefault(int(rec["r"]), []).append(block)
    elif kind == "atoms":
        if int(rec["base"]) != len(trace.atoms):
            raise TraceFormatError("atom table out of order")
        trace.atoms.extend(rec["v"])
    elif kind == "group":
        trace.groups[int(rec["gid"])] = {
            "gid": int(rec["gid"]), "name": str(rec["name"]), "ranks": [int(r) for r in rec["ranks"]],
            "desc": str(rec["desc"])}
    elif kind == "end":
        trace.ends[int(rec["r"])] = {"n": int(rec["n"]), "status": str(rec["status"]), "error": rec.get("error")}
    elif kind == "footer":
        trace.complete = True
    elif kind == "header":
        raise TraceFormatError("second header")
    # unknown record types from a newer minor version are skipped on purpose


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
            self.chunks.append({name: np.empty(size, dtype=np.int32 if name == "code" else _DTYPES[name])
                                for name in _STREAM})
            self.used.append(0)
        c, start = len(self.chunks) - 1, self.used[-1]
        self.used[-1] = start + n
        self.pieces.append((c, start, start + n))
        return self.pieces[-1], {name: col[start:start + n] for name, col in self.chunks[c].items()}

    def columns(self, name: str) -> list[np.ndarray]:
        """The buffers of one column, each cut to what was used."""
        return [chunk[name][:used] for chunk, used in zip(self.chunks, self.used)]

    def drop(self, name: str) -> None:
        """Release one column's buffers (once nothing else holds a view of them)."""
        for chunk in self.chunks:
            chunk.pop(name, None)


def _decode_pblock(trace: TraceData, rec: dict) -> codec.RankColumns:
    n, k, packed_p, packed_s = int(rec["n"]), int(rec["k"]), rec["p"], rec["s"]
    if not (0 < n <= BLOCK_EVENTS and 0 < k <= n):
        raise TraceFormatError("block of impossible size")
    if len(packed_s) != len(_STREAM):
        raise TraceFormatError("block of wrong width")
    try:
        table = codec.decode_table(packed_p, k, len(PATTERN_COLUMNS))
        _validate(table, _ATOM_AT, _GROUP_AT, trace)  # atoms and groups precede their first use
        patterns = {name: table[:, j].astype(_DTYPES[name]) for j, name in enumerate(PATTERN_COLUMNS)}
        code = codec.decode(packed_s[0], n)
        if code.min() < 0 or code.max() >= k:
            raise TraceFormatError("event refers to a missing pattern")
        piece, stream = trace.arena.take(n)
        stream["code"][:] = code
        for name, x in zip(_STREAM[1:], packed_s[1:]):
            codec.decode(x, n, out=stream[name])
    except codec.CodecError as e:
        raise TraceFormatError(str(e)) from None
    stream["ts"] /= codec.TS_TICKS
    rc = codec.RankColumns(patterns, stream, COLUMN_NAMES)
    rc.piece = piece
    return rc


def concat_ranks(pieces: list) -> codec.RankColumns:
    """Several blocks of one rank (pattern-coded or plain) as one RankColumns."""
    pieces = [codec.split(p, COLUMNS) for p in pieces]
    if len(pieces) == 1:
        return pieces[0]
    offsets = np.cumsum([0] + [len(p.patterns["op"]) for p in pieces[:-1]])
    patterns = {name: np.concatenate([p.patterns[name] for p in pieces]) for name in pieces[0].patterns}
    stream = {name: np.concatenate([p.stream[name] + (off if name == "code" else 0) for p, off in zip(pieces, offsets)])
              for name in pieces[0].stream}
    stream["code"] = stream["code"].astype(np.int32)
    return codec.RankColumns(patterns, stream, COLUMN_NAMES)


def _validate(table: np.ndarray, atom_at: list[int], group_at: int, trace: TraceData) -> None:
    """Every atom and group id a pattern table uses exists (one min / max over the matrix)."""
    atoms = table[:, atom_at]
    if atoms.size and (atoms.min() < -1 or atoms.max() >= len(trace.atoms)):
        raise TraceFormatError("an event refers to a missing atom")
    groups = table[:, group_at]
    if not groups.size:
        return
    if trace.known_gids is None or trace.known_gids[0] != len(trace.groups):  # groups came since: rebuild
        known = np.zeros(max(trace.groups, default=-1) + 2, dtype=bool)
        known[[g + 1 for g in trace.groups]] = True
        known[0] = True  # -1: no group
        trace.known_gids = (len(trace.groups), known)
    known = trace.known_gids[1]
    if groups.min() < -1 or groups.max() + 1 >= len(known) or not known[groups + 1].all():
        raise TraceFormatError("an event refers to a missing process group")


def _assemble(trace: TraceData, rows: dict, blocks: dict) -> None:
    world = trace.header["world_size"]
    plain_at = [_INT_COLUMNS.index(name) for name in ATOM_COLUMNS]
    for rank in sorted(set(rows) | set(blocks)):
        if not 0 <= rank < world:
            raise TraceFormatError(f"events of rank {rank} in a trace of world size {world}")
        parts = list(blocks.get(rank, []))
        if rows.get(rank):
            parts.append(_rows_to_columns(rows[rank]))
        for p in parts:
            if not isinstance(p, codec.RankColumns):  # rows and v1 blocks: checked here
                mat = np.stack([np.asarray(p[name], dtype=np.int64) for name in _INT_COLUMNS], axis=1)
                try:
                    _validate(mat, plain_at, _INT_COLUMNS.index("group"), trace)
                except TraceFormatError as e:
                    raise TraceFormatError(f"rank {rank}: {e}") from None
        trace.columns[rank] = concat_ranks(parts)


def _rows_to_columns(rows: list[list]) -> dict[str, np.ndarray]:
    out = {}
    for (name, dt), values in zip(COLUMNS, zip(*rows)):
        try:
            out[name] = np.asarray(values, dtype=dt)
        except (TypeError, ValueError, OverflowError):
            raise TraceFormatError(f"event column {name} holds a non-number") from None
    return out


def read_header(path: str | os.PathLike) -> dict:
    """Only the header of a trace or part (cheap: reads the first record)."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            unpacker = msgpack.Unpacker(f, raw=False, strict_map_key=False, max_buffer_size=1 << 24)
            rec = next(unpacker)
    except OSError as e:
        raise TraceFormatError(f"{source}: cannot read ({e.strerror})") from None
    except Exception as e:
        raise TraceFormatError(f"{source}: not a commtrace trace ({type(e).__name__})") from None
    return _check_header(rec, source)


# Op vocabulary shared by the recorder and the analyzer.
COLLECTIVE_OPS = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_coalesced", "all_gather_into_tensor",
    "all_gather_into_tensor_coalesced", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced", "broadcast", "reduce", "gather", "scatter", "all_to_all",
    "all_to_all_single", "barrier",
})
P2P_OPS = frozenset({"send", "recv"})
GROUP_OPS = frozenset({"init_process_group", "new_group", "split_group"})
OTHER_OPS = frozenset({"wait", "mesh", "redistribute"})
