"""Golden comm patterns: `traces/<example>.trace` for every shipped example, checked like a
snapshot test (`analyzer golden check`) and rewritten on purpose (`analyzer golden update`).

Goldens are written canonical so that re-recording gives byte-identical files and they stay
small and portable across checkouts: timestamps 0, no creation time, frames and config paths
relative to the repository (basename when outside it), events as msgpack rows (small ints
pack to one byte; a column block costs 4-8 bytes per value). Comparison never depends on
those bytes anyway: it is `analyzer.diff` over normalized signatures.

Recording needs torch: `tracer` is imported inside the functions that record, never at
import time (the analyzer starts without torch).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

from tracer import format as fmt
from tracer import parts as trace_parts
from tracer import reader as trace_reader
from tracer.codec import split

DEFAULT_SCRIPT_WORLD_SIZE = 4
_WORLD_SIZE_IN_DOC = re.compile(r"--world-size\s+(\d+)")


@dataclass
class GoldenResult:
    name: str
    golden: str
    """Path of the golden trace."""
    status: str
    """same, changed, new (no golden yet), written, or error."""
    diff: object = None
    """analyzer.diff.Diff when the status is changed."""
    error: str = ""
    trace: str = ""
    """Path of the trace compared with the golden."""


def examples(examples_dir: str) -> list[tuple[str, str]]:
    """(name, path) of every example: each *.toml config, and each *.py script."""
    paths = sorted(glob.glob(os.path.join(examples_dir, "*.toml")) + glob.glob(os.path.join(examples_dir, "*.py")))
    return [(os.path.splitext(os.path.basename(p))[0], p) for p in paths]


def script_world_size(path: str) -> int:
    """A script is recorded at the first `--world-size N` its own text shows (its usage line),
    else 4: the example documents how it is meant to run."""
    with open(path) as f:
        m = _WORLD_SIZE_IN_DOC.search(f.read())
    return int(m.group(1)) if m else DEFAULT_SCRIPT_WORLD_SIZE


def record_example(path: str, out: str, root: str) -> None:
    """Record one example as `tracer record` would; ValueError (one line) when it fails."""
    from tracer import config as config_mod
    from tracer.modes import ALIASES
    from tracer.program import Program
    from tracer.ranks import parse_ranks
    from tracer.record import record

    if path.endswith(".toml"):
        cfg = config_mod.load(path)
        mode = ALIASES[cfg.comm.mode]
        config_mod.check_mode(cfg, mode)
        snapshot = dict(cfg.to_dict(), config_file=os.path.relpath(path, root))
        res = record(config_mod.program(cfg), world_size=cfg.world_size, out=out, mode=mode,
                     ranks=parse_ranks(config_mod.ranks_spec(cfg), cfg.world_size), config=snapshot, progress=False)
    else:
        res = record(Program(script=path), world_size=script_world_size(path), out=out, progress=False)
    if res.errors:
        raise ValueError(f"{path}: {next(iter(res.errors.values()))}")


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
    if isinstance(value, str) and (os.path.isabs(value) or value.startswith("..")) and os.path.exists(
            os.path.join(cwd, value)):
        return _portable_path(value, root, cwd)
    return value


def canonical(data: fmt.TraceData, root: str, cwd: str) -> fmt.TraceData:
    """What varies between recordings of the same program, made constant: ts = 0, no creation
    time, repository-relative frames and config paths."""
    frame_ids = set()
    columns = {}
    for rank, cols in data.columns.items():
        cols = columns[rank] = split(cols, fmt.COLUMNS)
        cols.stream["ts"] = cols.stream["ts"] * 0.0
        frame_ids.update(int(f) for f in set(cols.patterns["frame"].tolist()) if f >= 0)
    atoms = list(data.atoms)
    for aid in frame_ids:
        atoms[aid] = _portable_frame(atoms[aid], root, cwd)
    header = dict(data.header, created="", config=_portable_config(data.header.get("config") or {}, root, cwd))
    return fmt.TraceData(header=header, atoms=atoms, groups=data.groups, columns=columns, ends=data.ends,
                         complete=data.complete)


def write_golden(trace_path: str, golden_path: str, root: str, cwd: str | None = None) -> None:
    data = canonical(trace_reader.read_trace(trace_path), root, cwd or os.getcwd())
    os.makedirs(os.path.dirname(golden_path) or ".", exist_ok=True)
    tmp = golden_path + ".tmp"
    trace_parts.write_data(tmp, data)
    os.replace(tmp, golden_path)


def compare(trace_path: str, golden_path: str) -> GoldenResult:
    """Diff a trace against its golden (normalized signatures and the volume table)."""
    from analyzer.diff import diff_traces
    from analyzer.load import LoadError, load

    name = os.path.splitext(os.path.basename(golden_path))[0]
    if not os.path.exists(golden_path):
        return GoldenResult(name, golden_path, "new")
    try:
        d = diff_traces(load(golden_path), load(trace_path))
    except LoadError as e:
        return GoldenResult(name, golden_path, "error", error=str(e))
    return GoldenResult(name, golden_path, "same" if d.equal else "changed", diff=d, trace=trace_path)


def run(examples_dir: str, traces_dir: str, work_dir: str, update: bool = False,
        given: dict[str, str] | None = None) -> list[GoldenResult]:
    """Record every example into work_dir (or take `given` traces by name), then compare each
    with traces_dir/<name>.trace, or (update) rewrite the golden."""
    root = os.path.dirname(os.path.abspath(examples_dir))
    results = []
    for name, path in examples(examples_dir):
        golden = os.path.join(traces_dir, name + ".trace")
        trace = (given or {}).get(name)
        if trace is None:
            if given is not None:
                continue  # traces were given: check only those
            trace = os.path.join(work_dir, name + ".trace")
            try:
                record_example(path, trace, root)
            except ValueError as e:
                results.append(GoldenResult(name, golden, "error", error=str(e)))
                continue
        if update:
            write_golden(trace, golden, root)
            results.append(GoldenResult(name, golden, "written"))
        else:
            results.append(compare(trace, golden))
    return results
