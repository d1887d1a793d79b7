"""The trace writer: appends records to a trace (traceformat/format.py holds their layout), so
that a killed process leaves every record it finished."""

from __future__ import annotations

import mmap
import os
from typing import Any

import msgpack
import numpy as np

from traceformat import codec
from traceformat.format import BLOCK_EVENTS, COLUMN_NAMES, COLUMNS, PATTERN_COLUMNS, PBLOCK_STREAM, VERSION, AtomTable


def _ev_prefix(rank: int) -> bytes:
    """The bytes msgpack writes for {"t": "ev", "r": rank, "v": ...} up to the values."""
    return b"\x83" + b"".join(msgpack.packb(x) for x in ("t", "ev", "r", rank, "v"))


class TraceWriter:
    """Appends records to a trace. Each record (an event with the atoms it introduced) is one
    write(), so a killed process leaves every record it finished and at most one partial record
    at the tail.

    `mapped` (a recorder's part file): records are copied into a shared memory map of the file
    instead of one write() syscall each. The pages belong to the kernel's page cache, so a
    SIGKILLed or hung-then-killed process loses nothing it copied, as with write(). The file
    grows in windows (allocated; FIRST_WINDOW, doubling up to MAP_WINDOW) and is cut to its real
    length on close; a process that never closes leaves zero padding after its last record. A
    record's first byte is stored last, so an unfinished record begins with a zero byte, which
    the reader takes as the end (no record of this format starts with one: every record is a
    map)."""

    MAP_WINDOW = 4 << 20
    FIRST_WINDOW = 256 << 10

    def __init__(self, path: str | os.PathLike, header: dict, *, mapped: bool = False):
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._atoms = AtomTable()
        self._flushed = 0  # atoms written so far
        self._packer = msgpack.Packer(use_bin_type=True)
        self._map: mmap.mmap | None = None
        self._pos = 0  # file offset of the next record (mapped)
        self._base = 0  # file offset where the map window starts
        self._end = 0  # file offset where the map window ends
        self._mapped = mapped
        self._window = self.FIRST_WINDOW  # bytes the next map window holds at least
        self._ev_prefix: dict[int, bytes] = {}
        # what this writer writes (version, columns), whatever was read
        self._write(dict(header, version=list(VERSION), columns=[list(c) for c in COLUMNS]))

    def _write(self, record: dict) -> None:
        self._write_bytes(self._packer.pack(record))

    def _write_bytes(self, data: bytes) -> None:
        if self._mapped:
            n = len(data)
            pos = self._pos
            if pos + n > self._end:
                self._remap(n)
            at = pos - self._base
            m = self._map
            m[at + 1 : at + n] = memoryview(data)[1:]  # type: ignore[index]
            m[at] = data[0]  # type: ignore[index]  # last: the record is complete once this is set
            self._pos = pos + n
            return
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def _remap(self, need: int) -> None:
        """Map a new window that starts at the page holding the next record and holds `need`
        bytes, growing the file to its end (the old window's pages stay in the page cache)."""
        base = self._pos - self._pos % mmap.ALLOCATIONGRANULARITY
        end = base + max(self._window, self._pos - base + need)
        # windows double up to MAP_WINDOW: a short recording allocates (and cuts back) 256 KiB,
        # not 4 MiB, which cost ~0.7 ms of each recording's set-up and close
        self._window = min(2 * self._window, self.MAP_WINDOW)
        # allocated, not a sparse hole: a full disk fails here with OSError, not as SIGBUS on a copy
        os.posix_fallocate(self._fd, base, end - base)
        window = mmap.mmap(self._fd, end - base, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=base)
        if self._map is not None:
            self._map.close()
        self._map, self._base, self._end = window, base, end

    def atom(self, value: Any) -> int:
        """Intern a msgpack-able value; returns its id. None is -1."""
        if type(value) is str:  # most atoms of a recording: op, module, phase, frame, dtype
            aid = self._atoms._ids.get(value)
            if aid is not None:
                return aid
        return -1 if value is None else self._atoms.intern(value)

    def _flush_atoms(self) -> None:
        values = self._atoms.values
        if len(values) > self._flushed:
            self._write({"t": "atoms", "base": self._flushed, "v": values[self._flushed :]})
            self._flushed = len(values)

    def group(self, gid: int, name: str, ranks: list[int], desc: str) -> None:
        self._write({"t": "group", "gid": gid, "name": name, "ranks": list(ranks), "desc": desc})

    def row(self, rank: int, values: list) -> None:
        """One event: with the atoms it introduced, one write() (a syscall per event is most of
        what writing costs a recording). The record is {"t": "ev", "r": rank, "v": values}; all
        but the values is packed once per rank."""
        prefix = self._ev_prefix.get(rank)
        if prefix is None:
            prefix = self._ev_prefix[rank] = _ev_prefix(rank)
        data = prefix + self._packer.pack(values)
        atoms = self._atoms.values
        if len(atoms) > self._flushed:
            data = self._packer.pack({"t": "atoms", "base": self._flushed, "v": atoms[self._flushed :]}) + data
            self._flushed = len(atoms)
        self._write_bytes(data)

    def block(self, rank: int, columns) -> None:
        """Events of one rank as pattern-coded blocks of up to BLOCK_EVENTS events."""
        self._flush_atoms()
        n = len(columns["op"])
        for start in range(0, n, BLOCK_EVENTS):
            stop = min(n, start + BLOCK_EVENTS)
            chunk = columns if (start, stop) == (0, n) else {k: columns[k][start:stop] for k in COLUMN_NAMES}
            rc = codec.split(chunk, COLUMNS)
            stream = dict(rc.stream, ts=np.round(rc.stream["ts"] * codec.TS_TICKS))
            self._write(
                {
                    "t": "pblock",
                    "r": rank,
                    "n": stop - start,
                    "k": len(rc.patterns["op"]),
                    "p": codec.encode_table([rc.patterns[name] for name in PATTERN_COLUMNS]),
                    "s": [codec.encode(stream[name]) for name in PBLOCK_STREAM],
                }
            )

    def numerics(self, records: list[dict]) -> None:
        """Numerics records (traceformat/numerics.py), written as given."""
        for rec in records:
            self._write(rec)

    def end(
        self, rank: int, n_events: int, status: str = "ok", error: str | None = None, error_text: str | None = None
    ) -> None:
        """A rank finished. `error`: one line; `error_text` (v2.2, only where the error's message
        has more lines): the whole error, its first line `error`'s."""
        self._flush_atoms()
        record = {"t": "end", "r": rank, "n": n_events, "status": status, "error": error}
        if error_text is not None:
            record["error_text"] = error_text
        self._write(record)

    def footer(self) -> None:
        self._flush_atoms()
        self._write({"t": "footer"})

    def close(self) -> None:
        if self._fd >= 0:
            if self._map is not None:
                self._map.close()
                self._map = None
            if self._mapped:
                os.ftruncate(self._fd, self._pos)  # drop the zero padding past the last record
            os.close(self._fd)
            self._fd = -1
