"""`tracer merge`: which files join into one trace (the parts of an interrupted recording, the
shards of one split with --ranks); traceformat/parts.py does the joining."""

from __future__ import annotations

import glob
import os

from traceformat.format import TraceFormatError
from traceformat.reader import read_header


def collect_parts(inputs: list[str]) -> list[str]:
    """What `tracer merge` joins: each input a folder (its *.part files), a .part file or a
    (partial) .trace, e.g. the shards of a recording split with --ranks. ValueError (one line)
    when an input is missing or empty, or two of them hold the same rank or world size differs."""
    files: list[str] = []
    for path in inputs:
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(path, "*.part")))
            if not found:
                raise ValueError(f"{path}: no .part files")
            files += found
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise ValueError(f"{path}: no such file or folder")
    owner: dict[int, str] = {}
    worlds: dict[int, str] = {}
    for f in files:
        try:
            header = read_header(f)
        except TraceFormatError as e:
            raise ValueError(str(e)) from None
        worlds.setdefault(int(header.get("world_size", 0)), f)
        for r in header.get("ranks", []):
            if r in owner:
                raise ValueError(f"rank {r} is in both {owner[r]} and {f}")
            owner[r] = f
    if len(worlds) > 1:
        (w1, f1), (w2, f2) = list(worlds.items())[:2]
        raise ValueError(f"world sizes differ: {w1} in {f1}, {w2} in {f2}")
    return files
