"""Golden traces, canonical: `traces/<example>.trace` for every shipped example, written so that
re-recording an unchanged example gives byte-identical files and they stay small and portable
across checkouts: timestamps 0, no creation time, frames and config paths relative to the
repository (basename when outside it). Events stay pattern blocks like any trace; comparison
never depends on the bytes anyway (`analyzer golden check`: analyzer.compare.diff over normalized
signatures). Recording the examples is the recorder's (`tracer golden update|check`,
tracer/record/golden.py); this module only names and writes goldens, torch-free.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable

from traceformat import format as fmt
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader
from traceformat.codec import split
from traceformat.output import refuse_inputs


def examples(examples_dir: str) -> list[tuple[str, str]]:
    """(name, path) of every example: each *.toml config, and each *.py script."""
    paths = sorted(glob.glob(os.path.join(examples_dir, "*.toml")) + glob.glob(os.path.join(examples_dir, "*.py")))
    return [(name_of(p), p) for p in paths]


def name_of(path: str) -> str:
    """The example a file is of (its config, its trace, its golden): the file name without extension."""
    return os.path.splitext(os.path.basename(path))[0]


def golden_path(traces_dir: str, name: str) -> str:
    return os.path.join(traces_dir, name + ".trace")


def check_examples_folder(examples_dir: str) -> None:
    """ValueError (one line) when the examples folder is missing."""
    if not os.path.isdir(examples_dir):
        raise ValueError(f"{examples_dir}: no such folder (give --examples DIR)")


def given_traces(examples_dir: str, given: Iterable[str], traces_dir: str | None = None) -> dict[str, str]:
    """{example name: trace} of traces given on a command line (`analyzer golden check`, `tracer
    golden update`), matched to examples by file name. ValueError (one line) when the examples
    folder or a trace is missing, or (`traces_dir` given: the goldens are to be rewritten) when
    a trace is the golden it would rewrite."""
    check_examples_folder(examples_dir)
    traces = {}
    for p in given:
        if not os.path.exists(p):
            raise ValueError(f"{p}: no such file")
        if traces_dir is not None:
            refuse_inputs(golden_path(traces_dir, name_of(p)), [p], what="golden")
        traces[name_of(p)] = p
    return traces


def matched(examples_dir: str, traces: dict[str, str]) -> list[tuple[str, str]]:
    """(name, trace) of every example that has one of `traces` ({name: trace}), in the examples' order."""
    return [(name, traces[name]) for name, _ in examples(examples_dir) if name in traces]


def _portable_path(path: str, root: str, cwd: str) -> str:
    full = os.path.normpath(os.path.join(cwd, path))
    rel = os.path.relpath(full, root)
    return os.path.basename(path) if rel.startswith("..") else rel


def _portable_frame(frame, root: str, cwd: str):
    """`path:line in fn` with path made relative to the repository."""
    if not isinstance(frame, str) or ":" not in frame:
        return frame
    path, rest = frame.split(":", 1)
    return _portable_path(path, root, cwd) + ":" + rest


def _portable_config(value, root: str, cwd: str):
    if isinstance(value, dict):
        return {k: _portable_config(v, root, cwd) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable_config(v, root, cwd) for v in value]
    if (
        isinstance(value, str)
        and (os.path.isabs(value) or value.startswith(".."))
        and os.path.exists(os.path.join(cwd, value))
    ):
        return _portable_path(value, root, cwd)
    return value


def canonical(data: fmt.TraceData, root: str, cwd: str) -> fmt.TraceData:
    """What varies between recordings of the same program, made constant: ts = 0, no creation
    time, repository-relative frames and config paths."""
    frame_ids: set[int] = set()
    columns = {}
    for rank, raw in data.columns.items():
        cols = columns[rank] = split(raw, fmt.COLUMNS)
        cols.stream["ts"] = cols.stream["ts"] * 0.0
        for name in ("frame", "user_frame"):
            frame_ids.update(int(f) for f in set(cols.patterns[name].tolist()) if f >= 0)
    atoms = list(data.atoms)
    for aid in frame_ids:
        atoms[aid] = _portable_frame(atoms[aid], root, cwd)
    header = dict(data.header, created="", config=_portable_config(data.header.get("config") or {}, root, cwd))
    return fmt.TraceData(
        header=header,
        atoms=atoms,
        groups=data.groups,
        columns=columns,
        ends=data.ends,
        complete=data.complete,
        numerics=data.numerics,
    )


def write_golden(trace_path: str, golden_path: str, root: str, cwd: str | None = None) -> None:
    data = canonical(trace_reader.read_trace(trace_path), root, cwd or os.getcwd())
    os.makedirs(os.path.dirname(golden_path) or ".", exist_ok=True)
    trace_parts.write_data(golden_path, data)  # atomic: a temp file renamed into place
