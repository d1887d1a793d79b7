"""Run the recording jobs on an executor and merge their parts into one .trace.

fake mode: one job (process) per simulated rank; local mode: one job for all ranks. The
executor (tracer/executors: the local process pool, or Ray) runs them, at most `jobs` at a
time. Each process streams its ranks' events into `OUT.parts/rank_NNNNN.part` (one write per
event), so a crash, a hang or a SIGKILL keeps everything recorded so far; `merge` joins the
parts afterwards. Ranks that fake compute could not record (they read a tensor value) are
recorded again with real compute. Ranks exchange the values of object collectives through
a channel folder in the parts folder (tracer/capture/channel.py).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from traceformat import parts as trace_parts
from traceformat.format import Mode
from traceformat.output import OutputError, refuse_inputs, writable
from traceformat.ranks import ranks_text
from traceformat.workers import cpu_count
from tracer import executors, rank_sharing
from tracer.capture import channel
from tracer.modes.run import NEEDS_REAL_COMPUTE, Job
from tracer.program import Program

INSTALL_TORCH = "pip install torch==2.13.0 (pin it: an unpinned torch can pull a multi-GB CUDA build)"


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM while recording (the CLI turns SIGTERM into this); `signum` says which."""

    def __init__(self, signum: int = signal.SIGINT, message: str = ""):
        super().__init__(message)
        self.signum = signum
        self.message = message


@dataclass(kw_only=True, slots=True)
class RecordResult:
    out: str
    """Path of the merged trace."""
    ranks: list[int]
    """Ranks recorded."""
    n_events: dict[int, int] = field(default_factory=dict)
    """Events per rank."""
    errors: dict[int, str] = field(default_factory=dict)
    """One line per rank that did not finish cleanly."""
    seconds: float = 0.0
    """Wall time of the recording."""
    compute: dict[int, str] = field(default_factory=dict)
    """"fake" or "real" per rank: how its tensor math ran."""
    notes: list[str] = field(default_factory=list)
    """Things the user should know (e.g. ranks re-recorded with real compute), one line each."""
    peak_rss: dict[int, int] = field(default_factory=dict)
    """Peak resident memory of each recording process, bytes, by the first rank it recorded
    (its own high-water mark, measured by the process itself: executors.own_peak_bytes)."""
    written: bool = False
    """Whether `out` was written (False when no rank recorded anything: the old file stays)."""
    derived: dict[int, int] = field(default_factory=dict)
    """Ranks derived by relabelling (not recorded), each with the rank it was derived from."""


def check_options(
    *,
    world_size: int | None = None,
    ranks: list[int] | None = None,
    timeout: float | None = None,
    jobs: int | None = None,
) -> None:
    """Every number a recording takes, checked in one place before any process starts
    (ValueError, one line). None means "not given" (the default applies)."""
    if world_size is not None and world_size < 1:
        raise ValueError(f"--world-size must be at least 1, got {world_size}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs} (omit it for one per core)")
    if timeout is not None and not timeout > 0:  # also NaN
        raise ValueError(f"--timeout must be a positive number of seconds, got {timeout:g} (omit it: no timeout)")
    if ranks is not None:
        if not ranks:
            raise ValueError("--ranks: no ranks to record")
        bad = sorted(r for r in ranks if world_size is not None and not 0 <= r < world_size)
        if bad:
            raise ValueError(f"--ranks: {bad[:8]} outside 0..{world_size - 1}")  # type: ignore[operator]  # bad: world_size given


def check_output(out: str, program: Program, config_file: str | None = None) -> None:
    """The trace, and the parts folder the ranks stream into (emptied first), never hold the
    program or its config (OutputError, one line)."""
    inputs = [program.script, config_file]
    refuse_inputs(out, inputs)
    writable(out)
    parts_dir = out + ".parts"
    for given in inputs:
        if (
            given is not None
            and os.path.exists(given)
            and os.path.isdir(parts_dir)
            and os.path.commonpath([os.path.realpath(given), os.path.realpath(parts_dir)])
            == os.path.realpath(parts_dir)
        ):
            raise OutputError(
                f"-o {out}: its parts folder {parts_dir} holds an input ({given}) and is emptied "
                "when recording starts: give another output path"
            )


def check_torch(executor: str) -> None:
    """Ranks run here need torch: say how to install it before any rank starts (a Ray cluster
    brings its own)."""
    if executor == "local" and importlib.util.find_spec("torch") is None:
        raise ValueError(f"tracer record needs torch, which {sys.executable} cannot import: {INSTALL_TORCH}")


def record(
    program: Program,
    *,
    world_size: int,
    out: str,
    mode: str = "fake",
    ranks: list[int] | None = None,
    config: dict | None = None,
    timeout: float | None = None,
    jobs: int | None = None,
    progress: bool = True,
    compute: str = "real",
    compute_why: str = "",
    executor: str = "local",
    ray_address: str | None = None,
    share: rank_sharing.SharePlan | None = None,
) -> RecordResult:
    """`compute`: "real" or "fake" (fake mode only; see tracer/compute.py), `compute_why` the
    reason for it, kept in the trace header. `executor`: "local" or "ray" (tracer/executors).
    `share`: record only its representatives and verification ranks and derive the other asked
    ranks by relabelling (tracer/rank_sharing.py; fake mode)."""
    program.check()
    check_options(world_size=world_size, ranks=ranks, timeout=timeout, jobs=jobs)
    if Mode.of(mode) not in (Mode.FAKE, Mode.LOCAL):
        raise ValueError(f"--mode must be fake or local, got {mode!r}")
    if compute not in ("fake", "real"):
        raise ValueError(f"--compute must be fake or real, got {compute!r}")
    if compute == "fake" and mode != "fake":
        raise ValueError("--compute fake needs --mode fake (local mode computes every rank with LocalTensor)")
    if executor not in executors.EXECUTORS:
        raise ValueError(f"--executor must be one of {', '.join(executors.EXECUTORS)}, got {executor!r}")
    check_output(out, program, (config or {}).get("config_file"))
    check_torch(executor)
    ranks = list(range(world_size)) if ranks is None else ranks
    parts_dir = out + ".parts"
    shutil.rmtree(parts_dir, ignore_errors=True)
    os.makedirs(parts_dir)
    workers = jobs or cpu_count()
    if share is not None and jobs is None and len(share.recorded) <= 2 * workers:
        # a few ranks, all at once: a last round of one rank would leave the other cores idle
        # (3 ranks on 2 cores: 1.5 ranks' time instead of 2)
        workers = len(share.recorded)
    common: dict[str, Any] = dict(
        program=program,
        mode=mode,
        world_size=world_size,
        parts_dir=parts_dir,
        config=dict(config or {}, program=program.label, args=program.args, ranks=ranks),
        root=os.getcwd(),
        threads=_threads(workers, len(ranks) if mode == "fake" else 1),
        timeout=timeout,
    )
    if mode == "fake":
        first = share.recorded if share is not None else ranks
        todo = [Job(ranks=[r], compute=compute, **common) for r in first]
    else:
        todo = [Job(ranks=ranks, **common)]
    start = time.perf_counter()
    result = RecordResult(out=out, ranks=ranks)
    helpers: list[int] = []  # ranks the asked ones waited on, run too and left out of the trace
    run = lambda js: executors.run(
        executor,
        js,
        workers=workers,
        timeout=timeout,
        progress=progress,
        ray_address=ray_address,
        helpers=helpers if mode == "fake" else None,
    )
    try:
        outcomes = run(todo)
    except ValueError:  # the executor could not start (e.g. no Ray cluster there): nothing recorded
        shutil.rmtree(parts_dir, ignore_errors=True)
        raise
    except KeyboardInterrupt as e:  # the executor killed the ranks on its way out
        raise _interrupted(e, out, parts_dir, ranks) from None
    derived: dict = {}
    if share is not None:  # verify the classes; record in full what did not verify
        clean = {job.ranks[0] for job, code in zip(todo, outcomes) if code == 0}
        derived, more, notes = rank_sharing.settle(share, parts_dir, clean)
        result.notes.extend(notes)
        if more:
            extra = [Job(ranks=[r], compute=compute, **common) for r in more]
            try:
                outcomes += run(extra)
            except KeyboardInterrupt as e:
                raise _interrupted(e, out, parts_dir, ranks) from None
            todo += extra
    again = [i for i, code in enumerate(outcomes) if code == NEEDS_REAL_COMPUTE]
    try:
        if again:  # fake compute met a tensor value: those ranks again, computing for real
            _note_fallback(result, [todo[i] for i in again])
            # helpers too: one that stopped for real compute is started again (with it) when awaited
            channel.forget_done(channel.channel_dir(parts_dir), [r for i in again for r in todo[i].ranks] + helpers)
            redo = [Job(ranks=todo[i].ranks, compute="real", **common) for i in again]
            for i, job, code in zip(again, redo, run(redo)):
                todo[i], outcomes[i] = job, code
        if helpers:
            result.notes.append(_helpers_note(sorted(set(helpers) - set(ranks))))
        result.compute = {r: job.compute for job in todo for r in job.ranks}
        result.peak_rss = executors.read_peaks(todo)  # a rank recorded again: its second process
        recorded = {r for job in todo for r in job.ranks}
        files = {r: os.path.join(parts_dir, f"rank_{r:05d}.part") for r in recorded}
        present = [p for p in files.values() if os.path.exists(p)]
        asked = [files[r] if r in files else derived[r] for r in ranks if r in files or r in derived]
        header = {
            "world_size": world_size,
            "mode": mode,
            "compute": _compute_header(result.compute),
            "compute_why": compute_why if not again else result.notes[-1],
        }
        stopped = {r: s for r, s in _rank_status(todo, outcomes, timeout).items() if r in ranks}
        if stopped:  # only when some rank was stopped from outside: a clean header stays as it was
            header["rank_status"] = stopped
        if derived:
            header["derived"] = rank_sharing.header_entry(share, derived)  # type: ignore[arg-type]  # derived: share given
        parts = [p for p in asked if not isinstance(p, str) or os.path.exists(p)]
        summary = trace_parts.merge(parts, out, header) if parts else None  # atomic: all or nothing
    except KeyboardInterrupt as e:
        raise _interrupted(e, out, parts_dir, ranks) from None
    result.written = summary is not None
    result.derived = {r: c.rep for c in (share.classes if share else []) for r in c.derive if r in derived}
    for r in result.derived:
        result.n_events[r] = summary.ends[r]["n"] if summary else 0
    for job, code in zip(todo, outcomes):
        for r in job.ranks:
            if r not in ranks:  # a verification rank nobody asked for: not in the trace
                continue
            end = summary.ends.get(r) if summary else None
            result.n_events[r] = end["n"] if end else 0
            if end and end["status"] == "ok":
                continue
            why = end["error"] if end and end["status"] == "error" else _exit_reason(code, timeout)
            result.errors[r] = f"rank {r}: {why} (log: {executors.log_path(job)})"
    result.seconds = time.perf_counter() - start
    shutil.rmtree(channel.channel_dir(parts_dir), ignore_errors=True)
    for p in present:
        os.remove(p)
    if not result.errors:
        shutil.rmtree(parts_dir, ignore_errors=True)
    return result


def _helpers_note(extra: list[int]) -> str:
    words = f"rank{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))}"
    return (
        f"also ran {words}, not asked for: the asked ranks wait for {'their' if len(extra) > 1 else 'its'} "
        f"messages (pipeline shapes, objects); not in the trace"
    )


def _rank_status(todo: list[Job], outcomes: list, timeout: float | None) -> dict[int, dict]:
    """What the trace header says of ranks whose process did not finish by itself (killed,
    timed out, never started): their parts cannot say it (a program's own exception is in its
    part's end record). Ranks that finished are left out: a header stays small at 100k ranks."""
    out = {}
    for job, code in zip(todo, outcomes):
        if code in (0, 3):
            continue
        status = (
            "timed_out"
            if code == "timeout"
            else "not_started"
            if isinstance(code, str) or code is None
            else "killed"
            if code < 0
            else "exited"
        )
        for r in job.ranks:
            out[r] = {"status": status, "why": _exit_reason(code, timeout)}
    return out


def _interrupted(e: KeyboardInterrupt, out: str, parts_dir: str, ranks: list[int]) -> Interrupted:
    """One line: what an interrupted recording kept, and where."""
    signum = getattr(e, "signum", signal.SIGINT)
    present = glob.glob(os.path.join(parts_dir, "rank_*.part"))
    size = sum(os.path.getsize(p) for p in present)
    old = f"{out} left as it was" if os.path.exists(out) else f"{out} not written"
    return Interrupted(
        signum,
        f"interrupted ({signal.Signals(signum).name}): ranks stopped; kept what "
        f"{len(present)} of {len(ranks)} rank(s) recorded ({size:,} bytes) in {parts_dir}/ "
        f"({old}); join them with: tracer merge {parts_dir} -o {out}",
    )


def collect_parts(inputs: list[str]) -> list[str]:
    """What `tracer merge` joins: each input a folder (its *.part files), a .part file or a
    (partial) .trace, e.g. the shards of a recording split with --ranks. ValueError (one line)
    when an input is missing or empty, or two of them hold the same rank or world size differs."""
    from traceformat.format import TraceFormatError
    from traceformat.reader import read_header

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


def _threads(workers: int, n_jobs: int) -> int:
    """torch threads per job: the cores shared among the jobs that run at once."""
    return max(1, cpu_count() // max(1, min(workers, n_jobs)))


def _note_fallback(result: RecordResult, jobs: list[Job]) -> None:
    ranks = [r for j in jobs for r in j.ranks]
    why = ""
    try:  # the first rank's reason, from its part (written before the process exited)
        from traceformat.reader import read_trace

        end = read_trace(os.path.join(jobs[0].parts_dir, f"rank_{ranks[0]:05d}.part")).ends.get(ranks[0])
        why = (end or {}).get("error") or ""
    except Exception:
        pass
    result.notes.append(
        f"fake compute: {len(ranks)} rank(s) read tensor values it does not have, recorded again "
        f"with real compute (ranks {ranks_text(ranks)}){': ' + why if why else ''}"
    )


def _compute_header(per_rank: dict[int, str]) -> str:
    kinds = set(per_rank.values())
    if len(kinds) == 1:
        return kinds.pop()
    return "fake, real on ranks " + ranks_text(sorted(r for r, c in per_rank.items() if c == "real"))


def _exit_reason(code: int | None, timeout: float | None) -> str:
    if code == "timeout":
        return f"timed out after {timeout:g} s (killed; events up to then are kept)"
    if isinstance(code, str):
        return code  # the executor's own line (e.g. a Ray task that failed)
    if code is None:
        return "did not finish"
    if code < 0:
        return f"killed by signal {-code} (events up to then are kept)"
    return f"exited with status {code}"
