"""`load_dumps`: a folder of Flight Recorder dumps (or one dump file) as a Trace, decoded on this
machine's cores (dumps.py: what the Trace holds).

- Whole history (`check`, `summary`): dumps are decoded in a worker pool and streamed back in
  file order (a worker sends ~60 bytes per entry).
- Frontier only (`hang`): each worker keeps its share of decoded dumps, the summaries alone come
  back, and only each group's frontier window travels (held.py). At 16,384 dumps x 2,000
  entries that is a few MB through the pipes instead of ~4 GB, and this process does not spend
  its core unpickling what the cut then drops.
"""

from __future__ import annotations

import gc
import os

from analyzer.model.trace import LoadError, Trace
from analyzer.sources.flight_recorder import held
from analyzer.sources.flight_recorder.dumps import accept, assemble, kind_of, read_one
from analyzer.sources.flight_recorder.options import ReadOptions
from analyzer.sources.flight_recorder.rank import RankDump
from analyzer.sources.flight_recorder.read import dump_files
from analyzer.sources.flight_recorder.window import Summary
from traceformat.workers import chunksize, cpu_count, pool

__all__ = ["load_dumps"]

PARALLEL_FROM = 32  # dumps; below that a worker process costs more than it saves


def _workers(n_files: int, jobs: int | None) -> int:
    """Worker processes: `jobs`, else one per CPU (2 included: decoding is the cost), never more
    than one per 8 dumps."""
    return max(1, min(jobs or cpu_count(), n_files // 8))


def load_dumps(path: str | os.PathLike, options: ReadOptions | None = None) -> Trace:
    """A folder of FR dumps (or one dump file) as a Trace; dumps that are missing are noted."""
    options = options or ReadOptions()
    enabled = gc.isenabled()
    gc.disable()  # millions of short-lived objects: the cyclic collector would rescan them again and again
    try:
        return _load(os.fspath(path), options)
    finally:
        if enabled:
            gc.enable()


def _load(path: str, options: ReadOptions) -> Trace:
    files = dump_files(path)
    if not files:
        raise LoadError(f"{path}: no Flight Recorder dumps found")
    workers = _workers(len(files), options.jobs)
    parallel = len(files) >= PARALLEL_FROM and workers >= 2
    if options.frontier:
        paths = [f for f, _ in files]
        if not parallel:
            return held.reduce(held.InProcess(), 1, paths, None, path, options)
        with held.Processes(workers) as decoders:
            return held.reduce(decoders, workers, paths, None, path, options)
    dumps: dict[int, RankDump] = {}
    summaries: dict[int, Summary] = {}
    notes: list[str] = []
    for d, summary in _read_all(files, workers if parallel else 1):
        if accept(d, dumps, notes, single=len(files) == 1):
            summaries[d.rank] = summary
    return assemble(path, dumps, summaries, notes, kind_of(files), options)


def _read_all(files: list, workers: int):
    """read_one over the files, streamed in order, on `workers` cores."""
    if workers < 2:
        yield from map(read_one, files)
        return
    with pool(workers) as p:
        yield from p.map(read_one, files, chunksize=min(64, chunksize(len(files), workers)))
