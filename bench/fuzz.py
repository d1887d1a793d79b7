"""Fuzz campaign: mutated traces, parts folders and Flight Recorder dumps (pickle and JSON)
through what every analyzer command runs, in-process: load, check, hang, diff, report (page
rendered too). Counts what each input did: analyzed, refused with a one-line error (what the
CLI turns into exit 2), or went wrong: an uncaught exception (a crash) or a case over the time
limit (a hang). The goal is 0 of both.

    python bench/fuzz.py                      # 100,000 cases, seed 0, one worker per core
    python bench/fuzz.py --cases 2000 --seed 7 --out crashes/
    python bench/fuzz.py --replay 12345       # one case again, with its traceback

Seeds: the golden traces (`traces/*.trace`, pattern blocks) and the same as streamed rows,
each golden split into a parts folder of per-rank row parts, and synthetic FR dumps (an
FSDP x TP pattern, `bench/fr_synth.py`; with a missing rank and a stuck collective too) as
pickles and as JSON. Mutations: byte level (truncate, bit flips, overwritten / inserted /
deleted / duplicated spans, splices of two seeds) and structural (a record's or an entry's
field set to an odd value or removed, entries dropped or reordered), one to three per case.
Case i is a pure function of (seed, i): a crash is replayed with --replay i.
Parts folders are decoded in-process here (the worker pool of `load` is for big folders).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import pickle
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # one worker per core: tiny frames, no thread pool churn

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "bench")]

from fuzz_mutate import dump_bytes, file_bytes  # noqa: E402

KINDS = ("trace", "rows", "parts", "fr_pickle", "fr_json")
SEED_TRACES = (
    "fsdp",
    "fsdp_ep",
    "fsdp_tp",
    "fsdp_tp_pp_1f1b",
    "fsdp_tp_pp_interleaved",
    "hsdp_tp",
    "llama3_debug_fsdp_tp",
    "llama3_debug_hsdp_tp",
    "torchtitan_llama3_fsdp_tp",
    "torchtitan_llama3_hsdp_tp",
)
"""Goldens the trace seeds come from, by name: a golden added to traces/ later does not renumber
the cases (case i stays the same input for a given seed while these files are unchanged)."""
MEMORY_LIMIT = 6 << 30
"""Address space of a worker (bytes)."""


class CaseTimeout(BaseException):
    """A case ran past --limit seconds (raised by SIGALRM; a BaseException so that no
    `except Exception` in the code under test swallows it)."""


# ---------------------------------------------------------------- seeds


def build_seeds(folder: str) -> dict[str, list]:
    """Seed inputs by kind: bytes for files, {name: bytes} for parts folders, dicts for dumps."""
    from fr_synth import dump, groups

    from traceformat import format as fmt
    from traceformat import parts as trace_parts
    from traceformat import reader as trace_reader

    seeds: dict[str, list] = {k: [] for k in KINDS}
    for path in (os.path.join(REPO, "traces", f"{name}.trace") for name in SEED_TRACES):
        seeds["trace"].append(open(path, "rb").read())
        data = trace_reader.read_trace(path)
        rows = os.path.join(folder, "rows.part")
        trace_parts.write_data(rows, data, rows=True)
        seeds["rows"].append(open(rows, "rb").read())
        parts = {}
        for rank in data.columns:
            one = fmt.TraceData(
                header=dict(data.header, ranks=[rank], part=True),
                atoms=data.atoms,
                groups=data.groups,
                columns={rank: data.columns[rank]},
                ends={rank: data.ends[rank]} if rank in data.ends else {},
                complete=True,
            )
            trace_parts.write_data(rows, one, rows=True)
            parts[f"rank_{rank:05d}.part"] = open(rows, "rb").read()
        seeds["parts"].append(parts)
    config, mine = groups(8, tp=4)
    healthy = {r: pickle.loads(dump(r, 8, 24, config, mine[r], tp=4)) for r in range(8)}
    dead = {r: d for r, d in healthy.items() if r != 5}  # rank 5 left no dump
    stuck = {r: _stuck(d, r) for r, d in healthy.items()}
    for dumps in (healthy, dead, stuck):
        seeds["fr_pickle"].append(dumps)
        seeds["fr_json"].append(dumps)
    return seeds


def _stuck(d: dict, rank: int) -> dict:
    """Rank 3 stops early; its peers' last entries stay scheduled."""
    d = pickle.loads(pickle.dumps(d))
    if rank == 3:
        d["entries"] = d["entries"][:16]
    else:
        for e in d["entries"][16:]:
            e["state"] = "scheduled"
    return d


def make_case(seeds: dict, seed: int, i: int, folder: str) -> tuple[str, str]:
    """Write case i into `folder` (emptied first); (kind, path to analyse)."""
    rng = random.Random(seed * 1_000_003 + i)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    kind = KINDS[i % len(KINDS)]
    if kind in ("trace", "rows"):
        data = file_bytes(rng, rng.choice(seeds[kind]), rng.choice(seeds["trace"] + seeds["rows"]))
        path = os.path.join(folder, "case.trace")
        open(path, "wb").write(data)
        return kind, path
    path = os.path.join(folder, "case")
    os.makedirs(path)
    if kind == "parts":
        parts = dict(rng.choice(seeds["parts"]))
        names = sorted(parts)
        for _ in range(rng.randint(1, 2)):
            name = rng.choice(names)
            r = rng.random()
            if r < 0.1:
                parts.pop(name, None)
            elif r < 0.15:
                parts[f"rank_{rng.randrange(64):05d}.part"] = parts.get(name, b"")
            elif name in parts:
                parts[name] = file_bytes(rng, parts[name], parts.get(rng.choice(names), b""))
        for name, data in parts.items():
            open(os.path.join(path, name), "wb").write(data)
        return kind, path
    dumps = rng.choice(seeds[kind])
    ranks = sorted(dumps)
    touched = set(rng.sample(ranks, rng.randint(1, 2)))
    for r in ranks:
        d = dumps[r]
        data = (
            dump_bytes(rng, kind, d)
            if r in touched
            else (pickle.dumps(d, protocol=2) if kind == "fr_pickle" else json.dumps(d).encode())
        )
        if r in touched and rng.random() < 0.05:
            continue  # the dump is gone
        name = f"rank_{r}" if kind == "fr_pickle" else f"trace_node00_{r}.json"
        open(os.path.join(path, name), "wb").write(data)
    return kind, path


# ---------------------------------------------------------------- the pipeline


def analyse(path: str, reference, render_page: bool = True) -> str:
    """What the CLI runs on one input; 'analyzed' or 'refused' (a one-line error), else raises.
    The report runs check, hang (where a rank can block), summary, volume and the diff against
    `reference`; hang runs on its own where the report skipped it, as `analyzer hang` would."""
    from analyzer.hang import analyze, frontier_rows
    from analyzer.loader import LoadError, load
    from analyzer.report import ReportInputs, build_report

    try:
        t = load(path)
    except LoadError:
        return "refused"
    report = build_report(t, ReportInputs(source=path, other=reference, other_source="reference"))
    if report.hang is None:
        frontier_rows(t, analyze(t))
    if render_page:
        from analyzer.render.html import render

        render(report)
    return "analyzed"


_STATE: dict = {}


def _init(seed: int, limit: float, work: str, out: str | None, render_every: int = 1) -> None:
    from analyzer.loader import load
    from traceformat import parts as trace_parts

    trace_parts.PARALLEL_FROM = 1 << 30  # decode parts in this process (module doc)
    import matplotlib

    matplotlib.use("Agg")
    folder = tempfile.mkdtemp(dir=work)
    _STATE.update(
        seed=seed,
        limit=limit,
        folder=folder,
        out=out,
        render_every=render_every,
        seeds=build_seeds(folder),
        reference=load(os.path.join(REPO, "traces", "fsdp.trace")),
    )

    def alarm(signum, frame):
        raise CaseTimeout()

    import resource

    # a case that asks for more memory than this fails with MemoryError (a crash) instead of
    # taking the machine down with it
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    signal.signal(signal.SIGPROF, alarm)


def run_case(i: int) -> tuple[int, str, str, str]:
    """(case, kind, outcome, signature of a crash or '')."""
    s = _STATE
    kind, path = make_case(s["seeds"], s["seed"], i, os.path.join(s["folder"], "case"))
    signal.setitimer(signal.ITIMER_PROF, s["limit"])
    try:
        outcome, sig = analyse(path, s["reference"], i % s["render_every"] == 0), ""
    except CaseTimeout:
        outcome, sig = "hang", "time limit"
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)
        ours = [f for f in tb if f.filename.startswith(REPO) and "/bench/" not in f.filename] or tb
        where = ours[-1]
        outcome, sig = "crash", f"{type(e).__name__} at {os.path.relpath(where.filename, REPO)}:{where.lineno}"
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    if outcome in ("crash", "hang") and s["out"]:
        keep = os.path.join(s["out"], f"case_{i}")
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(os.path.dirname(path), keep)
    return i, kind, outcome, sig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument(
        "--limit",
        type=float,
        default=20.0,
        help="CPU seconds per case before it counts as a hang "
        "(CPU time: a loaded machine does not make slow cases look hung).",
    )
    p.add_argument(
        "--render-every",
        type=int,
        default=50,
        help="Render the report page (matplotlib: ~1 s) "
        "for every Nth case; the report's content is built for every case.",
    )
    p.add_argument("--out", default=None, help="Copy crashing and hanging inputs here.")
    p.add_argument("--replay", type=int, default=None, help="Run one case in this process, with its traceback.")
    a = p.parse_args()
    if a.cases < 1 or a.workers < 1 or a.render_every < 1 or not a.limit > 0:
        sys.exit("error: --cases, --workers and --limit must be positive")
    work = tempfile.mkdtemp(prefix="commtrace-fuzz-")
    try:
        if a.replay is not None:
            _init(a.seed, 1e9, work, None)
            kind, path = make_case(_STATE["seeds"], a.seed, a.replay, os.path.join(_STATE["folder"], "case"))
            print(f"case {a.replay} ({kind}): {analyse(path, _STATE['reference'])}")
            return
        if a.out:
            os.makedirs(a.out, exist_ok=True)
        counts: Counter = Counter()
        crashes: dict[str, list[int]] = {}
        start = time.perf_counter()
        ctx = mp.get_context("spawn")  # polars' thread pool and fork do not mix
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped early: print what was done
        with ctx.Pool(a.workers, initializer=_init, initargs=(a.seed, a.limit, work, a.out, a.render_every)) as pool:
            results = pool.imap_unordered(run_case, range(a.cases))  # chunksize 1: next() takes a timeout
            try:
                _collect(a, results, counts, crashes, start)
            except KeyboardInterrupt:  # stopped early: the counts so far are printed
                print("  interrupted", flush=True)
            pool.terminate()
        seconds = time.perf_counter() - start
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _print(a, counts, crashes, seconds, sum(counts.values()))


def _collect(a, results, counts: Counter, crashes: dict, start: float) -> None:
    for n in range(1, a.cases + 1):
        try:  # a worker that died (e.g. aborted in native code) loses its cases: stop, say so
            i, kind, outcome, sig = results.next(timeout=8 * a.limit + 120)
        except mp.TimeoutError:
            counts["-", "lost"] = a.cases - n + 1
            print(f"  no result for {8 * a.limit + 120:g} s: a worker died; {a.cases - n + 1:,} cases lost")
            break
        counts[kind, outcome] += 1
        if sig:
            crashes.setdefault(f"{outcome}: {sig}", []).append(i)
        if n % 20000 == 0:
            _print(a, counts, crashes, time.perf_counter() - start, n)
        elif n % 1000 == 0:
            el = time.perf_counter() - start
            print(
                f"  {n:,} cases, {el:.0f} s, {n / el:.0f} cases/s, "
                f"{sum(v for (k, o), v in counts.items() if o == 'crash')} crashes, "
                f"{sum(v for (k, o), v in counts.items() if o == 'hang')} hangs",
                flush=True,
            )


def _print(a, counts: Counter, crashes: dict, seconds: float, done: int) -> None:
    outcomes = ("analyzed", "refused", "crash", "hang")
    print(
        f"fuzz: {done:,} of {a.cases:,} cases, seed {a.seed}, {a.workers} workers, {seconds:.0f} s "
        f"({done / seconds:.1f} cases/s), limit {a.limit:g} s per case"
        + (f", {counts['-', 'lost']:,} lost (a worker died)" if counts["-", "lost"] else ""),
        flush=True,
    )
    print(f"{'kind':<10}" + "".join(f"{o:>10}" for o in outcomes))
    for kind in KINDS:
        print(f"{kind:<10}" + "".join(f"{counts[kind, o]:>10,}" for o in outcomes))
    print(f"{'all':<10}" + "".join(f"{sum(counts[k, o] for k in KINDS):>10,}" for o in outcomes))
    for sig, cases in sorted(crashes.items(), key=lambda x: -len(x[1])):
        print(f"  {len(cases):>6} x {sig} (e.g. --replay {min(cases)})")


if __name__ == "__main__":
    main()
