"""Find and read Flight Recorder dump files, safely: the bytes side of the FR importer.

A dump is what `torch._C._distributed_c10d._dump_fr_trace(...)` (a pickle) or
`_dump_fr_trace_json(...)` returns, written to one file per rank under any name. Files are
recognised by their content (a pickle opcode stream, or JSON holding FR's keys); the rank comes
from a `rank` key when the dump has one, else from the last number of the file name
(`rank_3`, `trace_node02_3`, `nccl_trace_rank_3.json`).

Dumps come from clusters, so a pickle is untrusted: `SafeUnpickler` resolves no global but a few
builtin container types (FR's C++ pickler writes none at all: dicts, lists, tuples, strings,
numbers), so a pickle that would import a callable -- the only way a pickle runs code -- is
refused with a LoadError before anything is called.
"""

from __future__ import annotations

import builtins
import gc
import io
import json
import os
import pickle
import re

from analyzer.model.trace import LoadError

# (module, name) a pickle may resolve: inert builtin types only. FR's own dumps need none.
SAFE_GLOBALS = frozenset(
    {("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "str", "int", "float", "bool", "bytes")}
)
_SUFFIXES = re.compile(r"\.(json|pkl|pickle|bin|dump|fr|trace)$", re.IGNORECASE)
_TRAILING_NUMBER = re.compile(r"(\d+)$")
_SNIFF = 4096


class Refused(pickle.UnpicklingError):
    """A pickle that would resolve a global or a persistent id: never loaded."""


class SafeUnpickler(pickle.Unpickler):
    """Unpickles builtin data only: any other global (os.system, builtins.eval, a class) is
    refused, so no code in the pickle ever runs."""

    def find_class(self, module: str, name: str):
        if (module, name) in SAFE_GLOBALS:
            return getattr(builtins, name)
        raise Refused(f"refused global {module}.{name}")

    def persistent_load(self, pid):
        raise Refused("refused persistent id")


def sniff(path: str) -> str | None:
    """'pickle' or 'json' when the file looks like an FR dump, else None (commtrace traces are
    msgpack maps: never a pickle PROTO opcode followed by a protocol number)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF)
    except OSError:
        return None
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"
    text = head.lstrip()
    if text.startswith(b"{") and any(k in head for k in (b'"entries"', b'"pg_config"', b'"pg_status"')):
        return "json"
    return None


def dump_files(path: str) -> list[tuple[str, str]]:
    """(file, 'pickle' | 'json') of every FR dump at `path` (a file or a folder, walked)."""
    if os.path.isfile(path):
        kind = sniff(path)
        return [(path, kind)] if kind else []
    listing = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            listing.append((full, st.st_mtime_ns, st.st_size))
    key = (path, hash(tuple(listing)))
    if _SNIFFED.get(key) is None:
        # recognising the source and reading it both ask: each file is sniffed once while
        # none changed (16k dumps: 16k opens, not 32k)
        _SNIFFED.clear()
        _SNIFFED[key] = [(f, kind) for f, _, _ in listing if (kind := sniff(f))]
    return list(_SNIFFED[key])


_SNIFFED: dict[tuple, list] = {}


def dump_kinds(path: str) -> set[str]:
    """The kinds ('pickle', 'json') of the FR dumps at `path`: a dump file, or a folder holding
    dumps and no commtrace .trace / .part files. Empty when the path is not FR dumps."""
    if os.path.isfile(path):
        kind = sniff(path)
        return {kind} if kind else set()
    if not os.path.isdir(path):
        return set()
    for _, _, files in os.walk(path):
        if any(f.endswith((".trace", ".part")) for f in files):
            return set()
    return {kind for _, kind in dump_files(path)}


def read_dump(path: str, kind: str, data: bytes | None = None) -> dict:
    """One dump (the file, or its bytes `data`) as a dict with at least `entries` (a list).
    One-line LoadError otherwise."""
    name = os.path.basename(path)
    enabled = gc.isenabled()
    gc.disable()  # millions of small dicts: the cyclic collector would rescan them again and again
    try:
        if kind == "pickle" and data is not None:
            dump = SafeUnpickler(io.BytesIO(data)).load()
        elif kind == "pickle":
            # a buffered file lets the C unpickler peek ahead (3x faster than a BytesIO)
            with open(path, "rb", buffering=1 << 20) as f:
                dump = SafeUnpickler(f).load()
        elif data is not None:
            dump = json.loads(data)
        else:
            with open(path, "rb") as f:
                dump = json.load(f)
    except Refused as e:
        raise LoadError(
            f"{name}: refused to load this pickle ({e}): a Flight Recorder dump holds only builtin data"
        ) from None
    except pickle.UnpicklingError as e:  # cut short (a rank killed while writing), or garbage
        raise LoadError(f"{name}: not a readable Flight Recorder dump ({e})") from None
    except (
        OSError,
        ValueError,
        EOFError,
        TypeError,
        IndexError,
        KeyError,
        AttributeError,
        RecursionError,
        MemoryError,
        OverflowError,  # a length field past any size (BYTEARRAY8 of 2**63)
    ) as e:
        raise LoadError(f"{name}: not a readable Flight Recorder dump ({type(e).__name__})") from None
    finally:
        if enabled:
            gc.enable()
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise LoadError(f"{name}: not a Flight Recorder dump (no entries list)")
    if set(map(type, dump.get("entries", []))) - {dict}:
        raise LoadError(f"{name}: not a Flight Recorder dump (an entry is not a map)")
    dump.setdefault("entries", [])
    return dump


def will_need(path: str) -> None:
    """Asks the kernel to start reading `path` now (POSIX_FADV_WILLNEED), so a reader that decodes
    one dump while the next ones load keeps the disk busy: on a cold cache the dumps' bytes,
    not the decoding, are the cost (measured here: 6.4 -> 5.0 ms per 400 KB dump)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def rank_of(dump: dict, path: str) -> int | None:
    """The dump's own `rank` key, else the last number of the file name."""
    rank = dump.get("rank")
    if isinstance(rank, int) and rank >= 0:
        return rank
    m = _TRAILING_NUMBER.search(_SUFFIXES.sub("", os.path.basename(path)))
    return int(m.group(1)) if m else None
