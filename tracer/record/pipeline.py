"""Run a RecordRequest's jobs on an executor and merge their parts into one .trace.

fake mode: one job (process) per simulated rank; local mode: one job for all ranks. The
executor (tracer/executors: the local process pool, or Ray) runs them, at most `jobs` at a
time. Each process streams its ranks' events into `OUT.parts/rank_NNNNN.part` (one write per
event), so a crash, a hang or a SIGKILL keeps everything recorded so far; `merge` joins the
parts afterwards. Ranks that fake compute could not record (they read a tensor value) are
recorded again with real compute. Ranks exchange the values of object collectives through
a channel folder in the parts folder (tracer/fake/channel.py).

The stages, in order (record): plan the jobs, run them, verify the shared ranks (and record in
full what did not verify), record again what needs real compute, merge, and the result. A
recording where some asked rank failed never replaces a trace already at OUT: it is merged
beside it (result.failed_path). An OSError writing the trace is one line (OutputError).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import signal
import time

from traceformat import parts as trace_parts
from traceformat.format import TraceData
from traceformat.output import OutputError, cannot_write, refuse_inputs
from traceformat.parts import PARTS_GLOB, part_path
from traceformat.ranks import ranks_text
from traceformat.workers import cpu_count
from tracer import executors
from tracer.executors.outcome import Ending, Outcome
from tracer.executors.shared import last_line, log_path, read_peaks
from tracer.fake import channel
from tracer.modes.run import Job
from tracer.record import sharing
from tracer.record.request import RecordRequest
from tracer.record.result import Interrupted, RankFailure, RecordResult, failed_path, more_lines


def record(request: RecordRequest) -> RecordResult:
    """Record `request` (checked first: ValueError, one line, before any process starts). Ctrl-C
    or SIGTERM: the ranks are stopped, their parts kept, and Interrupted says where."""
    request.check()
    run = _Recording(request)
    try:
        run.first()
        run.settle_shared()
        run.real_compute_again()
        summary = run.merge()
    except KeyboardInterrupt as e:  # the executor killed the ranks on its way out
        raise run.interrupted(e) from None
    return run.finish(summary)


class _Recording:
    """One recording under way: its jobs, their outcomes (in the same order), what it noted."""

    def __init__(self, request: RecordRequest):
        self.request = request
        self.ranks = request.asked
        self.parts_dir = request.parts_dir
        shutil.rmtree(self.parts_dir, ignore_errors=True)
        try:
            os.makedirs(self.parts_dir)
        except OSError as e:
            raise cannot_write(self.parts_dir, e) from None
        self.workers = self._workers()
        self.template = Job(
            ranks=[],
            program=request.program,
            mode=request.mode,
            world_size=request.world_size,
            parts_dir=self.parts_dir,
            config=dict(request.config, program=request.program.label, args=request.program.args, ranks=self.ranks),
            root=os.getcwd(),
            threads=_threads(self.workers, 1 if request.mode == "local" else len(self.ranks)),
            timeout=request.timeout,
            numerics=request.numerics,
        )
        self.todo = self._plan()
        self.outcomes: list[Outcome] = []
        self.helpers: list[int] = []  # ranks the asked ones waited on, run too and left out of the trace
        self.derived: dict[int, TraceData] = {}
        self.present: list[str] = []  # the part files on disk, removed once merged
        self.again: list[int] = []  # indexes of the jobs recorded again with real compute
        self.fallback_why = ""  # the note on ranks recorded again with real compute: the header's compute_why
        self.result = RecordResult(out=request.out, ranks=self.ranks)
        self.start = time.perf_counter()

    def _workers(self) -> int:
        req = self.request
        if req.mode == "real":  # every rank at once: each waits for its peers (request.check_real)
            return req.world_size
        workers = req.jobs or cpu_count()
        if req.share is not None and req.jobs is None and len(req.share.recorded) <= 2 * workers:
            # a few ranks, all at once: a last round of one rank would leave the other cores idle
            # (3 ranks on 2 cores: 1.5 ranks' time instead of 2)
            workers = len(req.share.recorded)
        return workers

    def _job(self, ranks: list[int], compute: str | None = None) -> Job:
        return dataclasses.replace(self.template, ranks=ranks, compute=compute or self.request.compute)

    def _plan(self) -> list[Job]:
        """fake mode: a job per rank (with sharing, only the recorded ranks); real mode: a job per
        rank of the world (the asked ones are merged, the others only serve them); local: one job."""
        if self.request.mode == "real":
            return [self._job([r]) for r in range(self.request.world_size)]
        if self.request.mode != "fake":
            return [dataclasses.replace(self.template, ranks=self.ranks)]
        first = self.request.share.recorded if self.request.share is not None else self.ranks
        return [self._job([r]) for r in first]

    def _run(self, jobs: list[Job]) -> list[Outcome]:
        req = self.request
        return executors.run(
            req.executor,
            jobs,
            workers=self.workers,
            timeout=req.timeout,
            progress=req.progress,
            ray_address=req.ray_address,
            helpers=self.helpers if req.mode == "fake" else None,
        )

    def first(self) -> None:
        try:
            self.outcomes = self._run(self.todo)
        except ValueError:  # the executor could not start (e.g. no Ray cluster there): nothing recorded
            shutil.rmtree(self.parts_dir, ignore_errors=True)
            raise

    def settle_shared(self) -> None:
        """Verify the sharing classes; record in full what did not verify."""
        share = self.request.share
        if share is None:
            return
        clean = {job.ranks[0] for job, outcome in zip(self.todo, self.outcomes) if outcome.finished}
        self.derived, more, notes = sharing.settle(share, self.parts_dir, clean)
        self.result.notes.extend(notes)
        if more:
            extra = [self._job([r]) for r in more]
            self.outcomes += self._run(extra)
            self.todo += extra

    def real_compute_again(self) -> None:
        """Fake compute met a tensor value: those ranks again, computing for real."""
        self.again = [i for i, outcome in enumerate(self.outcomes) if outcome.ending is Ending.NEEDS_REAL_COMPUTE]
        if self.again:
            self.fallback_why = _note_fallback(self.result, [self.todo[i] for i in self.again])
            # helpers too: one that stopped for real compute is started again (with it) when awaited
            again_ranks = [r for i in self.again for r in self.todo[i].ranks]
            channel.forget_done(channel.channel_dir(self.parts_dir), again_ranks + self.helpers)
            redo = [self._job(self.todo[i].ranks, "real") for i in self.again]
            for i, job, outcome in zip(self.again, redo, self._run(redo)):
                self.todo[i], self.outcomes[i] = job, outcome
        if self.helpers:
            self.result.notes.append(_helpers_note(sorted(set(self.helpers) - set(self.ranks))))

    def merge(self) -> TraceData | None:
        """The asked ranks' parts (and derived ranks) into OUT, atomically; None when no rank recorded."""
        req, result = self.request, self.result
        result.compute = {r: job.compute for job in self.todo for r in job.ranks}
        result.peak_rss = read_peaks(self.todo)  # a rank recorded again: its second process
        files = {r: part_path(self.parts_dir, r) for job in self.todo for r in job.ranks}
        self.present = [p for p in files.values() if os.path.exists(p)]
        asked = [files[r] if r in files else self.derived[r] for r in self.ranks if r in files or r in self.derived]
        header = {
            "world_size": req.world_size,
            "mode": req.mode,
            "compute": _compute_header(result.compute),
            "compute_why": self.fallback_why or req.compute_why,  # why some ranks computed for real
        }
        stopped = {r: s for r, s in _rank_status(self.todo, self.outcomes, req.timeout).items() if r in self.ranks}
        if stopped:  # only when some rank was stopped from outside: a clean header stays as it was
            header["rank_status"] = stopped
        if self.derived:
            header["derived"] = sharing.header_entry(req.share, self.derived)  # type: ignore[arg-type]  # derived: share given
        parts = [p for p in asked if not isinstance(p, str) or os.path.exists(p)]
        result.path = req.out
        if self._failed() and os.path.isfile(req.out):  # a trace is there: the failed run does not replace it
            result.path = failed_path(req.out)
            refuse_inputs(result.path, [req.program.script, req.config.get("config_file")])
        try:
            combine = None
            if req.numerics and req.mode == "real":  # each rank digested its own values
                from tracer.numerics import combine as numerics

                combine = numerics.combine
            # atomic: all or nothing
            return trace_parts.merge(parts, result.path, header, combine_numerics=combine) if parts else None
        except OSError as e:  # no space, a read-only mount: what the ranks recorded stays in their parts
            kept = f"; the ranks' parts are kept in {self.parts_dir}/ (tracer merge {self.parts_dir} -o OTHER.trace)"
            raise OutputError(f"{cannot_write(result.path, e)}{kept}") from None

    def _failed(self) -> bool:
        """Whether some asked rank did not finish cleanly (finish() says how)."""
        asked = set(self.ranks)
        return any(not o.finished for job, o in zip(self.todo, self.outcomes) if asked.intersection(job.ranks))

    def finish(self, summary: TraceData | None) -> RecordResult:
        """Events and errors per asked rank; the parts folder removed when every rank recorded."""
        req, result = self.request, self.result
        result.written = summary is not None
        share = req.share
        result.derived = {r: c.rep for c in (share.classes if share else []) for r in c.derive if r in self.derived}
        for r in result.derived:
            result.n_events[r] = summary.ends[r]["n"] if summary else 0
        for job, outcome in zip(self.todo, self.outcomes):
            for r in job.ranks:
                if r not in self.ranks:  # a verification rank nobody asked for: not in the trace
                    continue
                end = summary.ends.get(r) if summary else None
                result.n_events[r] = end["n"] if end else 0
                if end and end["status"] == "ok":
                    continue
                why = end["error"] if end and end["status"] == "error" else outcome.why(req.timeout)
                text = end.get("error_text") if end and end["status"] == "error" else None
                more = len(text.splitlines()) - 1 if text else 0
                if outcome.ending is Ending.EXITED and last_line(log_path(job)):  # os._exit(1) after a message
                    why = f"{why}: {last_line(log_path(job))}"
                kept = more_lines(more)
                result.errors[r] = f"rank {r}: {why} ({kept + '; ' if kept else ''}log: {log_path(job)})"
                result.failures[r] = RankFailure(
                    rank=r, why=why, log=log_path(job), ended=_ended(self.parts_dir, r), more=more
                )
        if result.written and not result.errors and result.path != req.out:  # every end record ok after all
            os.replace(result.path, req.out)
            result.path = req.out
        result.seconds = time.perf_counter() - self.start
        shutil.rmtree(channel.channel_dir(self.parts_dir), ignore_errors=True)
        for p in self.present:
            os.remove(p)
        if not result.errors:
            shutil.rmtree(self.parts_dir, ignore_errors=True)
        return result

    def interrupted(self, e: KeyboardInterrupt) -> Interrupted:
        """One line: what an interrupted recording kept, and where."""
        out, parts_dir = self.request.out, self.parts_dir
        signum = getattr(e, "signum", signal.SIGINT)
        present = glob.glob(os.path.join(parts_dir, PARTS_GLOB))
        size = sum(os.path.getsize(p) for p in present)
        old = f"{out} left as it was" if os.path.exists(out) else f"{out} not written"
        return Interrupted(
            signum,
            f"interrupted ({signal.Signals(signum).name}): ranks stopped; kept what "
            f"{len(present)} of {len(self.ranks)} rank(s) recorded ({size:,} bytes) in {parts_dir}/ "
            f"({old}); join them with: tracer merge {parts_dir} -o {out}",
        )


def _ended(parts_dir: str, rank: int) -> float:
    """When the rank's process last wrote its part (its end record, or its last event)."""
    try:
        return os.path.getmtime(part_path(parts_dir, rank))
    except OSError:
        return float("inf")


def _helpers_note(extra: list[int]) -> str:
    words = f"rank{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))}"
    return (
        f"also ran {words}, not asked for: the asked ranks wait for {'their' if len(extra) > 1 else 'its'} "
        f"messages (pipeline shapes, objects); not in the trace"
    )


def _rank_status(todo: list[Job], outcomes: list[Outcome], timeout: float | None) -> dict[int, dict]:
    """What the trace header says of ranks whose process did not finish by itself (killed,
    timed out, never started): their parts cannot say it (a program's own exception is in its
    part's end record). Ranks that finished are left out: a header stays small at 100k ranks."""
    out: dict[int, dict] = {}
    for job, outcome in zip(todo, outcomes):
        if outcome.ran_to_end:
            continue
        for r in job.ranks:
            out[r] = {"status": outcome.header_status(), "why": outcome.why(timeout)}
            if outcome.stack:  # where its Python was when it was stopped (analyzer hang shows it)
                out[r].update(stack=list(outcome.stack), at=outcome.at)
    return out


def _threads(workers: int, n_jobs: int) -> int:
    """torch threads per job: the cores shared among the jobs that run at once."""
    return max(1, cpu_count() // max(1, min(workers, n_jobs)))


def _note_fallback(result: RecordResult, jobs: list[Job]) -> str:
    """Note the ranks recorded again with real compute (and why); returns the note."""
    ranks = [r for j in jobs for r in j.ranks]
    why = ""
    try:  # the first rank's reason, from its part (written before the process exited)
        from traceformat.reader import read_trace

        end = read_trace(part_path(jobs[0].parts_dir, ranks[0])).ends.get(ranks[0])
        why = (end or {}).get("error") or ""
    except Exception:
        pass
    note = (
        f"fake compute: {len(ranks)} rank(s) read tensor values it does not have, recorded again "
        f"with real compute (ranks {ranks_text(ranks)}){': ' + why if why else ''}"
    )
    result.notes.append(note)
    return note


def _compute_header(per_rank: dict[int, str]) -> str:
    kinds = set(per_rank.values())
    if len(kinds) == 1:
        return kinds.pop()
    return "fake, real on ranks " + ranks_text(sorted(r for r, c in per_rank.items() if c == "real"))
