"""PyTorch Flight Recorder JSON dumps (`_dump_fr_trace_json`): one file, or a folder of them
(any naming, walked). The importer itself is flight_recorder/."""

from __future__ import annotations

from analyzer.model.trace import Trace
from analyzer.sources.flight_recorder.read import dump_kinds

NAME = "Flight Recorder JSON dumps"


def recognise(path: str) -> bool:
    return dump_kinds(path) == {"json"}


def load(path: str, **options) -> Trace:
    """options["fr"]: a flight_recorder.options.ReadOptions (frontier window, -j)."""
    from analyzer.sources.flight_recorder.load import load_dumps

    return load_dumps(path, options.get("fr"))
