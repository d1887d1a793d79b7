"""Load any input the analyzer reads (analyzer/sources/) as a `Trace` (analyzer/model/trace.py).

>>> from analyzer import load
>>> t = load("fsdp.trace")          # or a parts folder, or Flight Recorder dumps
"""

from __future__ import annotations

import glob
import os

from analyzer import sources
from analyzer.model.trace import LoadError, Trace

__all__ = ["LoadError", "load"]


def load(path: str | os.PathLike, **options) -> Trace:
    """A .trace file, a folder of .part files, OUT.trace whose recording never merged (its
    OUT.trace.parts folder is loaded instead, with a note), or Flight Recorder dumps (a folder
    or one file): whichever source in analyzer/sources/ recognises the path."""
    path = os.fspath(path)
    notes: list[str] = []
    if not os.path.exists(path) and os.path.isdir(path + ".parts"):
        notes.append(f"{path} was never written (recording interrupted); loaded {path}.parts")
        path = path + ".parts"
    elif os.path.isfile(path) and _newer_parts(path):
        notes.append(
            f"{path}.parts/ holds parts newer than {path} (a recording interrupted or failed since?): "
            f"this is the older {path}; `analyzer check {path}.parts` reads the newer parts"
        )
    source = sources.find(path)
    if source is None:
        raise LoadError(f"{path}: no such file")
    trace = source.load(path, **options)
    trace.notes[:0] = notes
    return trace


def _newer_parts(path: str) -> bool:
    """Whether OUT.trace.parts/ holds a part written after OUT.trace (a recording stopped since)."""
    parts = glob.glob(os.path.join(path + ".parts", "*.part"))
    return bool(parts) and max(os.path.getmtime(p) for p in parts) > os.path.getmtime(path)
