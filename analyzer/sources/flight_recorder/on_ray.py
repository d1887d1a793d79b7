"""Flight Recorder dumps decoded and reduced on a Ray cluster (`--ray ADDRESS`): beyond what one
machine can read, or where the dumps are (a shared filesystem the cluster's nodes mount).

Each Ray actor (one per CPU of the cluster, or -j) is a held.Decoder: it decodes its share of
the files and keeps the columns in its own memory; the driver gets one `Summary` per dump,
plans each group's frontier window for `hang`, and the actors send back only the entries from
there on (for `check` / `summary`, every entry) -- held.reduce, as a local `hang` runs on this
machine's processes. Same verdict; the driver's memory holds the windows, never the dump set.

The path is listed on the driver, read on the workers: on a real cluster it must be the same
path on every node (a shared filesystem), and commtrace (with its C reader built) installed on
every node.
"""

from __future__ import annotations

import os
from typing import Any

from analyzer.model.trace import LoadError, Trace
from analyzer.sources.flight_recorder.held import Decoder, reduce
from analyzer.sources.flight_recorder.options import ReadOptions
from traceformat.workers import cpu_count


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


class _Actors:
    """Ray actors, one Decoder each (held.py's decoder set)."""

    def __init__(self, ray, n: int) -> None:
        self.ray = ray
        actor = ray.remote(num_cpus=1)(Decoder)
        self.actors = [actor.remote() for _ in range(n)]

    def calls(self, method: str, args: list[tuple]) -> list:
        return self.ray.get([getattr(a, method).remote(*x) for a, x in zip(self.actors, args)])

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)


def _run(ray, items: list, make: Any, source: str, options: ReadOptions) -> Trace:
    cpus = int(ray.cluster_resources().get("CPU", 1))
    n = max(1, min(options.jobs or cpus, len(items) // 8 or 1))
    actors = _Actors(ray, n)
    try:
        return reduce(actors, n, items, make, source, options)
    finally:
        actors.close()
