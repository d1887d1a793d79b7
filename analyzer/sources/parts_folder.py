"""A folder of per-rank .part files (an unmerged or sharded recording; partial .trace shards
too): combined in memory by traceformat.parts, decoded by a process pool when there are many."""

from __future__ import annotations

import glob
import os

from analyzer.model.trace import LoadError, Trace, from_data

NAME = "commtrace parts folder"


def recognise(path: str) -> bool:
    return os.path.isdir(path)


def load(path: str, **options) -> Trace:
    from traceformat import format as fmt
    from traceformat import parts as trace_parts

    parts = sorted(glob.glob(os.path.join(path, "*.part")) + glob.glob(os.path.join(path, "*.trace")))
    if not parts:
        raise LoadError(f"{path}: folder holds no .part or .trace files")
    try:
        data = trace_parts.combine(trace_parts.read_many(parts))
    except fmt.TraceFormatError as e:
        raise LoadError(str(e)) from None
    return from_data(data)
