"""Inputs the analyzer reads, one module per input format, each turning a path into a `Trace`.

A source module exposes:
- `NAME`: what the input is called in messages;
- `recognise(path) -> bool`: whether the path is this input (by content where it can be);
- `load(path, **options) -> Trace`: read it, raising `LoadError` (one line) on bad input.
`SOURCES` lists them most specific first; `analyzer.loader.load` takes the first that recognises
the path. A new input format is one new module here, added to `SOURCES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from analyzer.sources import fr_json, fr_pickle, parts_folder, trace_file

if TYPE_CHECKING:
    from analyzer.model.trace import Trace


class Source(Protocol):
    NAME: str

    def recognise(self, path: str) -> bool: ...

    def load(self, path: str, **options) -> Trace: ...


# Flight Recorder dumps are recognised by content, so they come before the commtrace inputs
# (a folder, or any existing file) that take what is left.
SOURCES: tuple[Source, ...] = (fr_pickle, fr_json, parts_folder, trace_file)


def find(path: str) -> Source | None:
    """The first source that recognises `path`, None when none does (e.g. no such file)."""
    return next((s for s in SOURCES if s.recognise(path)), None)
