"""Flight Recorder dumps decoded and reduced on a Ray cluster (`--ray ADDRESS`): beyond what one
machine can read, or where the dumps are (a shared filesystem the cluster's nodes mount).

Each Ray actor (one per CPU of the cluster, or -j) decodes its share of the files and keeps the
columns in its own memory; the driver gets one `Summary` per dump (a few rows per group:
window.py), resolves the groups and, for `hang`, plans each group's frontier window, and the
actors send back only the entries from there on (for `check` / `summary`, every entry). The
driver then builds the same Trace as a local run from the same columns: same verdict, and its
memory holds the windows, never the whole dump set.

The path is listed on the driver, read on the workers: on a real cluster it must be the same
path on every node (a shared filesystem), and commtrace (with its C reader built) installed on
every node.
"""

from __future__ import annotations

import os
from typing import Any

from analyzer.model.trace import LoadError, Trace
from analyzer.sources.flight_recorder import window
from analyzer.sources.flight_recorder.blocks import RankDump
from analyzer.sources.flight_recorder.dumps import accept, assemble, read_one, resolve
from analyzer.sources.flight_recorder.options import ReadOptions
from analyzer.sources.flight_recorder.rank import read_rank_data
from analyzer.sources.flight_recorder.read import sniff
from traceformat.workers import cpu_count


class Decoder:
    """A Ray actor: decodes its share of the dumps and holds them until the driver's cut."""

    def __init__(self) -> None:
        self.dumps: dict[int, RankDump] = {}

    def decode(self, items: list, make: Any = None) -> list[tuple]:
        """Per item (a file path, or with `make` an argument of make(item) -> (name, pickle
        bytes)): (index, file, rank, error, refused, kind, summary) of those that are dumps."""
        import gc

        gc.disable()  # as the local reader: the collector would rescan every decoded container
        out = []
        for i, item in enumerate(items):
            if make is None:
                kind = sniff(item)
                if kind is None:
                    continue
                d, s = read_one((item, kind))
            else:
                name, data = make(item)
                kind = "pickle"
                d = read_rank_data(name, data, kind)
                s = None
                if not d.error and d.rank is not None:
                    window.number_p2p(d)
                    s = window.summarize(d)
            if s is not None:
                self.dumps[i] = d
            out.append((i, d.file, d.rank, d.error, d.refused, kind, s))
        gc.enable()
        return out

    def take(self, cuts: dict) -> list[RankDump]:
        """The accepted dumps (index -> window.Cut, or None: whole), cut; the rest dropped."""
        out = []
        for i, where in cuts.items():
            d = self.dumps.pop(i)
            out.append(window.cut(d, where) if where is not None else d)
        self.dumps.clear()
        return out


def listing(path: str) -> list[str]:
    """Every file at `path` (a file, or a folder walked in name order); which ones are dumps is
    decided where they are read."""
    if os.path.isfile(path):
        return [path]
    out: list[str] = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        out.extend(os.path.join(root, f) for f in sorted(files))
    return out


def connect(address: str, jobs: int | None):
    """ray, initialised: "local" starts a cluster of this machine's CPUs (stopped by the caller:
    returns whether it started one), "auto" joins RAY_ADDRESS or a running cluster, else the
    address. One-line LoadError when Ray is missing or the cluster cannot be reached."""
    try:
        import ray
    except ImportError:
        raise LoadError("--ray needs Ray: pip install 'commtrace[cluster]' (or ray>=2.9)") from None
    if ray.is_initialized():
        return ray, False
    opts: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if address == "local":
        opts["num_cpus"] = jobs or cpu_count()
        target = None
    else:
        target = address
    try:
        ray.init(address=target, **opts)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise LoadError(f"--ray {address}: cannot reach the Ray cluster ({str(e).splitlines()[0][:160]})") from None
    return ray, True


def load_path(path: str, fr: ReadOptions) -> Trace:
    """The dumps at `path` (a folder or one file), decoded on the Ray cluster fr.ray names."""
    if not os.path.exists(path):
        raise LoadError(f"{path}: no such file")
    return run(listing(path), None, path, fr)


def run(items: list, make: Any, source: str, options: ReadOptions) -> Trace:
    """The Trace of the dumps `items` name (files; or make(item) -> (name, bytes) on the workers:
    bench/fr_ray_rows.py's simulated dump sets), decoded on the Ray cluster."""
    import gc

    ray, started = connect(options.ray or "auto", options.jobs)
    enabled = gc.isenabled()
    gc.disable()  # the windows' columns: many small arrays, no cycles
    try:
        return _run(ray, items, make, source, options)
    finally:
        if enabled:
            gc.enable()
        if started:
            ray.shutdown()


def _run(ray, items: list, make: Any, source: str, options: ReadOptions) -> Trace:
    cpus = int(ray.cluster_resources().get("CPU", 1))
    n = max(1, min(options.jobs or cpus, len(items) // 8 or 1))
    actor = ray.remote(num_cpus=1)(Decoder)
    actors = [actor.remote() for _ in range(n)]
    shares = [items[k * len(items) // n : (k + 1) * len(items) // n] for k in range(n)]
    metas = ray.get([a.decode.remote(share, make) for a, share in zip(actors, shares)])
    if not any(metas):
        raise LoadError(f"{source}: no Flight Recorder dumps found")
    single = sum(map(len, metas)) == 1
    seen: dict[int, RankDump] = {}
    where: dict[int, tuple[int, int]] = {}  # rank -> (actor, index)
    summaries: dict[int, window.Summary] = {}
    notes: list[str] = []
    kinds = set()
    for k, meta in enumerate(metas):
        for i, file, rank, error, refused, kind, summary in meta:
            kinds.add(kind)
            if accept(RankDump(file=file, rank=rank, error=error, refused=refused), seen, notes, single):
                where[rank] = (k, i)
                summaries[rank] = summary
    if not summaries:
        raise LoadError(f"{source}: no readable Flight Recorder dump" + (f" ({notes[0]})" if notes else ""))
    cuts: dict = {}
    if options.frontier:
        _, groups, _, _, _, by_local = resolve(summaries)
        cuts = window.plan(list(summaries.values()), groups, by_local, options.context)
    asks: list[dict] = [{} for _ in actors]
    for rank, (k, i) in where.items():
        asks[k][i] = cuts.get(rank)
    dumps = {d.rank: d for part in ray.get([a.take.remote(ask) for a, ask in zip(actors, asks)]) for d in part}
    for a in actors:
        ray.kill(a)
    kind = "+".join(sorted(kinds))
    return assemble(source, dumps, summaries, notes, kind, options, cut=False)
