"""A commtrace .trace file (traceformat/): decoded by the format's reader."""

from __future__ import annotations

import os

from analyzer.model.trace import LoadError, Trace, from_data

NAME = "commtrace trace"


def recognise(path: str) -> bool:
    return os.path.exists(path) and not os.path.isdir(path)


def load(path: str, **options) -> Trace:
    from traceformat import format as fmt
    from traceformat import reader as trace_reader

    try:
        data = trace_reader.read_trace(path)
    except fmt.TraceFormatError as e:
        raise LoadError(str(e)) from None
    return from_data(data)
