"""Reading traces: records -> TraceData, with every block decoded and validated (a corrupt or
truncated file keeps what came before, with a note). The other half of traceformat/format.py, which
defines the records and writes them; traceformat/codec.py packs a block's columns. Torch-free."""

from __future__ import annotations

import os
from typing import Any

import msgpack
import numpy as np

from traceformat import codec, numerics
from traceformat.format import (
    ADDED_COLUMNS,
    ATOM_COLUMNS,
    BLOCK_EVENTS,
    COLUMN_DEFAULTS,
    COLUMN_NAMES,
    COLUMNS,
    DTYPES,
    FORMAT_NAME,
    INT_COLUMNS,
    PATTERN_ATOM_AT,
    PATTERN_COLUMNS,
    PATTERN_GROUP_AT,
    PBLOCK_STREAM,
    VERSION,
    TraceData,
    TraceFormatError,
)

INT32_END = 1 << 31
"""Group ids and ranks are int32 in the frames: a record past that is corrupt."""


def _rank(rec: dict) -> int:
    rank = int(rec["r"])
    if not 0 <= rank < INT32_END:
        raise TraceFormatError("rank out of range")
    return rank


def _check_header(rec: Any, source: str) -> dict:
    if not isinstance(rec, dict) or rec.get("t") != "header" or rec.get("format") != FORMAT_NAME:
        raise TraceFormatError(f"{source}: not a commtrace trace (no commtrace header)")
    version = rec.get("version")
    if not (isinstance(version, list) and len(version) == 2 and all(isinstance(v, int) for v in version)):
        raise TraceFormatError(f"{source}: corrupt header (version)")
    if version[0] > VERSION[0]:
        raise TraceFormatError(
            f"{source}: trace format v{version[0]}.{version[1]} is newer than this reader "
            f"(v{VERSION[0]}.{VERSION[1]}); upgrade commtrace"
        )
    if not isinstance(rec.get("world_size"), int) or rec["world_size"] <= 0:
        raise TraceFormatError(f"{source}: corrupt header (world_size)")
    ranks = rec.get("ranks", [])
    if not isinstance(ranks, list) or not all(type(r) is int and 0 <= r < INT32_END for r in ranks):
        raise TraceFormatError(f"{source}: corrupt header (ranks)")  # parts and merges read it
    _layout(rec, source)
    return rec


class _Layout:
    """Where this file keeps each column this reader knows, by name (format v2.x): a newer minor
    version may add columns anywhere in the header's list, and so in every row and pattern
    table; extra per-event streams come after the known ones. Unknown columns are skipped."""

    def __init__(self, names: list[str]):
        self.width = len(names)
        # columns of a later minor version that this file lacks: read as their default, from
        # one more (virtual) column past the file's own
        self.absent = [name for name in COLUMN_NAMES if name not in names]
        self.fill = [COLUMN_DEFAULTS[name] for name in self.absent]
        have = names + self.absent
        self.row_at = [have.index(name) for name in COLUMN_NAMES]
        pattern_names = [name for name in names if name not in codec.STREAM_COLUMNS]
        self.pattern_width = len(pattern_names)
        self.pattern_at = [(pattern_names + self.absent).index(name) for name in PATTERN_COLUMNS]
        self.same = names == list(COLUMN_NAMES)


def _layout(header: dict, source: str) -> _Layout:
    columns = header.get("columns")
    if not isinstance(columns, list) or not all(
        isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c) for c in columns
    ):
        raise TraceFormatError(f"{source}: corrupt header (columns)")
    names = [name for name, _ in columns]
    if len(set(names)) != len(names):
        raise TraceFormatError(f"{source}: corrupt header (a column named twice)")
    given = dict(map(tuple, columns))
    for name, dtype in COLUMNS:
        if name in ADDED_COLUMNS and name not in given:
            continue  # an older minor version: read as its default
        if given.get(name) != dtype:
            why = f"no column {name}" if name not in given else f"column {name} is {given[name]}, not {dtype}"
            raise TraceFormatError(f"{source}: unsupported column layout ({why})")
    return _Layout(names)


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
        unpacker = msgpack.Unpacker(
            f, raw=False, strict_map_key=False, read_size=min(1 << 24, limit), max_buffer_size=limit
        )
        trace: TraceData | None = None
        layout: _Layout | None = None
        rows: dict[int, list] = {}
        blocks: dict[int, list] = {}
        offset = 0
        try:
            for rec in unpacker:
                if rec == 0 and type(rec) is int and trace is not None:
                    # a zero byte where a record starts: the unfinished tail of a memory-mapped
                    # part (a process killed before closing; see TraceWriter), not a record
                    trace.truncated_at = offset
                    break
                if trace is None:
                    trace = TraceData(header=_check_header(rec, source))
                    layout = _layout(trace.header, source)
                else:
                    _apply(trace, rec, rows, blocks, layout)  # type: ignore[arg-type]  # set with the header
                offset = unpacker.tell()
        except TraceFormatError as e:
            if str(e).startswith(source):
                raise
            raise TraceFormatError(f"{source}: corrupt record at byte {offset} ({e})") from None
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


def _apply(trace: TraceData, rec: Any, rows: dict, blocks: dict, layout: _Layout) -> None:
    if not isinstance(rec, dict):
        raise TraceFormatError("record is not a map")
    kind = rec.get("t")
    if kind == "ev":
        values = rec["v"]
        if not isinstance(values, list) or len(values) != layout.width:
            raise TraceFormatError("event row of wrong width")
        if layout.absent:
            values = values + layout.fill
        rows.setdefault(_rank(rec), []).append(values if layout.same else [values[i] for i in layout.row_at])
    elif kind == "block":
        n, cols = int(rec["n"]), rec["c"]
        if len(cols) != layout.width:
            raise TraceFormatError("block of wrong width")
        cols = list(cols) + [np.full(n, v, dtype=DTYPES[a]).tobytes() for a, v in zip(layout.absent, layout.fill)]
        arrays = {name: np.frombuffer(cols[i], dtype=DTYPES[name]) for name, i in zip(COLUMN_NAMES, layout.row_at)}
        if any(len(a) != n for a in arrays.values()):
            raise TraceFormatError("block column of wrong length")
        blocks.setdefault(_rank(rec), []).append(arrays)
    elif kind == "pblock":
        block = _decode_pblock(trace, rec, layout)  # before setdefault: a corrupt block leaves no empty entry
        blocks.setdefault(_rank(rec), []).append(block)
    elif kind == "atoms":
        if int(rec["base"]) != len(trace.atoms):
            raise TraceFormatError("atom table out of order")
        trace.atoms.extend(rec["v"])
    elif kind == "group":
        gid, ranks = int(rec["gid"]), [int(r) for r in rec["ranks"]]
        if not all(0 <= v < INT32_END for v in (gid, *ranks)):  # frames hold them as int32
            raise TraceFormatError("group id or rank out of range")
        trace.groups[gid] = {"gid": gid, "name": str(rec["name"]), "ranks": ranks, "desc": str(rec["desc"])}
    elif kind == "end":
        error, text = rec.get("error"), rec.get("error_text")
        if (error is not None and not isinstance(error, str)) or (text is not None and not isinstance(text, str)):
            raise TraceFormatError("end record with an error that is not text")
        end = {"n": int(rec["n"]), "status": str(rec["status"]), "error": error}
        if text is not None:  # v2.2: the whole error, where its message has more lines
            end["error_text"] = text
        trace.ends[_rank(rec)] = end
    elif kind == numerics.RECORD:
        try:
            numerics.decode(rec)
        except numerics.NumericsError as e:
            raise TraceFormatError(str(e)) from None
        trace.numerics.append(rec)
    elif kind == numerics.RANK_RECORD:
        try:
            numerics.decode_rank(rec)
        except numerics.NumericsError as e:
            raise TraceFormatError(str(e)) from None
        trace.rank_numerics.append(rec)
    elif kind == "footer":
        trace.complete = True
    elif kind == "header":
        raise TraceFormatError("second header")
    # unknown record types from a newer minor version are skipped on purpose


def _decode_pblock(trace: TraceData, rec: dict, layout: _Layout) -> codec.RankColumns:
    n, k, packed_p, packed_s = int(rec["n"]), int(rec["k"]), rec["p"], rec["s"]
    if not (0 < n <= BLOCK_EVENTS and 0 < k <= n):
        raise TraceFormatError("block of impossible size")
    if len(packed_s) < len(PBLOCK_STREAM) or (layout.same and len(packed_s) != len(PBLOCK_STREAM)):
        raise TraceFormatError("block of wrong width")
    try:
        table = codec.decode_table(packed_p, k, layout.pattern_width)
        if layout.absent:  # columns of a later minor version: their default on every pattern
            table = np.hstack([table, np.tile(np.asarray(layout.fill, dtype=table.dtype), (k, 1))])
        if not layout.same:
            table = table[:, layout.pattern_at]  # the known columns, in this reader's order
        _validate(table, PATTERN_ATOM_AT, PATTERN_GROUP_AT, trace)  # atoms and groups precede their first use
        patterns = {name: table[:, j].astype(DTYPES[name]) for j, name in enumerate(PATTERN_COLUMNS)}
        code = codec.decode(packed_s[0], n)
        if code.min() < 0 or code.max() >= k:
            raise TraceFormatError("event refers to a missing pattern")
        piece, stream = trace.arena.take(n)
        stream["code"][:] = code
        for name, x in zip(PBLOCK_STREAM[1:], packed_s[1:]):
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
    stream = {
        name: np.concatenate([p.stream[name] + (off if name == "code" else 0) for p, off in zip(pieces, offsets)])
        for name in pieces[0].stream
    }
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
    plain_at = [INT_COLUMNS.index(name) for name in ATOM_COLUMNS]
    for rank in sorted(set(rows) | set(blocks)):
        if not 0 <= rank < world:
            raise TraceFormatError(f"events of rank {rank} in a trace of world size {world}")
        parts = list(blocks.get(rank, []))
        if rows.get(rank):
            parts.append(_rows_to_columns(rows[rank]))
        for p in parts:
            if not isinstance(p, codec.RankColumns):  # rows and v1 blocks: checked here
                mat = np.stack([np.asarray(p[name], dtype=np.int64) for name in INT_COLUMNS], axis=1)
                try:
                    _validate(mat, plain_at, INT_COLUMNS.index("group"), trace)
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
