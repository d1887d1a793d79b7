"""PyTorch Flight Recorder pickle dumps (`_dump_fr_trace`): one file, or a folder of dumps (any
naming, walked; JSON dumps in the same folder load with them). Untrusted: read by a restricted
unpickler (flight_recorder/read.py). The importer itself is flight_recorder/."""

from __future__ import annotations

from analyzer.model.trace import Trace
from analyzer.sources.flight_recorder.read import dump_kinds

NAME = "Flight Recorder pickle dumps"


def recognise(path: str) -> bool:
    return "pickle" in dump_kinds(path)


def load(path: str, **options) -> Trace:
    """options["fr"]: a flight_recorder.options.ReadOptions (frontier window, -j)."""
    from analyzer.sources.flight_recorder.load import load_dumps

    return load_dumps(path, options.get("fr"))
