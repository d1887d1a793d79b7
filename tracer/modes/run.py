"""Inside one recording process: hook torch, run the program, close the rank streams.

fake mode: this process is one simulated rank (torchrun env of that rank, the program's own
init_process_group served by the recording fake backend).
local mode: this process runs all ranks under LocalTensorMode(world_size); the program is SPMD,
so a branch on dist.get_rank() takes rank 0's side on every simulated rank.
real mode: this process is one rank of a real job (the same torchrun env as in fake mode), its
process groups carried out by real gloo over one store every rank process shares (tracer/real/).
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field

from traceformat.format import FRAME_VIA
from tracer.modes import OTHER_MODES
from tracer.program import Program
from tracer.record.result import STOPPED_WITH


@dataclass(kw_only=True, slots=True)
class Job:
    program: Program
    """What to run."""
    mode: str
    """"fake", "local" or "real"."""
    world_size: int
    """Number of simulated ranks."""
    ranks: list[int]
    """Ranks this job writes streams for (one in fake mode; all asked-for ranks in local mode)."""
    parts_dir: str
    """Where each rank's part file goes."""
    config: dict = field(default_factory=dict)
    """Snapshot stored in every header."""
    root: str = ""
    """Folder that user frames are shown relative to."""
    compute: str = "real"
    """"real": tensor math runs; "fake": under FakeTensorMode (shapes only, see
    fake/compute.py). fake mode only."""
    timeout: float | None = None
    """Seconds a rank waits for a peer's object before it fails (fake mode; None: as long as
    the peer runs)."""
    numerics: bool = False
    """Record numerics digests per step (local mode; tracer/numerics/hooks.py)."""
    threads: int = 0
    """torch intra-op threads for this process (0: torch's default, one per core). Ranks
    recorded side by side get a share of the cores each: oversubscribed OpenMP threads spin
    and made a pool of 2 ranks on 2 cores 4x slower than running them one after the other."""


NEEDS_REAL_COMPUTE = 4
"""run_job's exit status when fake compute met a tensor value it does not have."""


def torchrun_env(rank: int, world_size: int) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "commtrace",
    }


def run_job(job: Job) -> int:
    """Run `job` in this process; returns 0 when the program finished, 3 when it raised,
    NEEDS_REAL_COMPUTE when it read a tensor value under fake compute."""
    import contextlib

    import torch
    import torch.distributed as dist

    from tracer.capture import compiled, ddp, patches
    from tracer.capture.code_paths import ProgramCode, program_home
    from tracer.capture.recorder import Recorder

    if job.threads > 0:
        torch.set_num_threads(job.threads)
    # A dry run computes on whatever bytes the fake collectives leave behind; denormal garbage
    # makes CPU math (Adam's sqrt) up to 100x slower without changing what is communicated.
    torch.set_flush_denormal(True)
    pg_rank = 0 if job.mode == "local" else job.ranks[0]
    os.environ.update(torchrun_env(pg_rank, job.world_size))
    from tracer.capture import watchdog

    watchdog.start(pg_rank)
    rec = Recorder(
        mode=job.mode,
        world_size=job.world_size,
        ranks=job.ranks,
        parts_dir=job.parts_dir,
        config=job.config,
        root=job.root or os.getcwd(),
        program=ProgramCode(program_home(job.program.script, job.program.entrypoint)),
    )
    p = patches.Patcher()
    status, error, code = "ok", None, 3
    error_text: str | None = None  # the whole error, where its message has more lines than `error`
    failed: list[int] = []  # local mode: the simulated ranks an error is theirs alone (arg_checks)
    ch = None
    num = None
    said = sys.stderr = LastLine(sys.stderr)  # what an argparse error said before its SystemExit
    try:
        patches.install(p, rec, rank=pg_rank, world_size=job.world_size)
        ddp.install(p)
        if job.mode == "local":
            from torch.distributed._local_tensor import LocalTensorMode

            from tracer.local import fsdp, ops, plain, rank_reads, rank_uses, rng

            ops.install(p, rec)
            rng.install(p)
            plain.install(p)
            fsdp.install(p)
            rank_reads.install(p, rec)
            rank_uses.install(p)
            rec.attribution.install()
            if job.numerics:
                from tracer.numerics.hooks import Numerics

                num = Numerics(rec, job.world_size)
                num.install(p)
            compiled.install(p, rec.attribution)
            with LocalTensorMode(job.world_size):
                job.program.run(init_globals={"int": rank_reads.ProgramInt})
        elif job.mode == "real":
            from tracer.real import install as real

            real.install(job.parts_dir, job.world_size)
            rec.attribution.install()
            if job.numerics:
                from tracer.numerics.per_rank import RankNumerics

                num = RankNumerics(rec, pg_rank)
                num.install(p)
            compiled.install(p, rec.attribution)
            job.program.run()
        else:
            from tracer.capture.process_group import RecordingProcessGroup
            from tracer.fake import object_collectives, values
            from tracer.fake.channel import Channel, channel_dir

            ch = Channel.current = Channel(channel_dir(job.parts_dir), pg_rank, job.timeout)
            RecordingProcessGroup.carry = values.carry
            object_collectives.install(p)
            fake = contextlib.nullcontext()
            if job.compute == "fake":
                from tracer.fake import compute as fake_compute

                fake_compute.install(p)
                fake = fake_compute.FakeCompute(rec)
            rec.attribution.install()
            compiled.install(p, rec.attribution)
            with fake:
                job.program.run()
    except SystemExit as e:
        if e.code not in (None, 0):
            status, error = "error", exit_line(e.code, said.line())
            traceback.print_exc()
    except BaseException as e:  # the program's own failure: recorded, reported as one line,
        from tracer.fake.channel import PeerRecordedAgain

        status, error = "error", one_line_error(e, rec)  # its traceback in the rank's log
        error_text = whole_error(e, error)
        failed = list(getattr(e, "failed_ranks", None) or [])
        traceback.print_exc()
        if isinstance(e, PeerRecordedAgain):  # its sender is recorded again: so is this rank
            status, error = "error", f"needs real compute: {e}"
            code = NEEDS_REAL_COMPUTE
        elif job.compute == "fake":
            from tracer.fake import compute as fake_compute

            if fake_compute.is_data_dependent(e):
                status, error = "error", f"needs real compute: {error}"
                code = NEEDS_REAL_COMPUTE
    finally:
        sys.stderr = said.stream
        if ch is not None:
            from tracer.fake.channel import NEEDS_REAL

            ch.finished(NEEDS_REAL if code == NEEDS_REAL_COMPUTE else "")
            Channel.current = None
        try:
            rec.attribution.uninstall()
        except Exception:
            pass
        if num is not None:
            num.close()
        if job.mode == "local":
            from tracer.local import rank_branch

            rank_branch.finish_all()
        _close(rec, status, error, failed, error_text)
        from tracer.capture import process_group

        process_group.RecordingProcessGroup.recorder = None  # closed: nothing may write to it
        process_group.RecordingProcessGroup.carry = None
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass
        if job.mode == "real":
            from tracer.real import install as real

            real.uninstall()
        p.undo()
    return 0 if status == "ok" else code


def _close(rec, status: str, error: str | None, failed: list[int], error_text: str | None = None) -> None:
    """Close every stream with how the run ended. In local mode arguments that only some
    simulated ranks got wrong (arg_checks: their own splits, shards) are those ranks' error;
    the others stopped with them, one process running them all."""
    mine = [r for r in rec.ranks if r in failed]
    others = [r for r in rec.ranks if r not in failed]
    if not mine or not others:
        rec.close(status, error, error_text=error_text)
        return
    who = f"{STOPPED_WITH} {mine[0]}" if len(mine) == 1 else f"{STOPPED_WITH}s {', '.join(map(str, mine))}"
    rec.close(status, error, ranks=mine, error_text=error_text)
    rec.close(status, f"{who}, whose arguments were rejected (local mode runs every rank in one process)", ranks=others)


def exit_line(code: object, last: str) -> str:
    """'the program exited with status 2: train.py: error: unrecognized arguments: --bogus': the
    status of a SystemExit and the last line the program wrote to stderr before it (argparse's
    message); `sys.exit("why")` exits with status 1 and says why itself."""
    if not isinstance(code, int):
        code, last = 1, str(code).strip().splitlines()[-1] if str(code).strip() else last
    text = f"the program exited with status {code}"
    return f"{text}: {last[:300]}" if last else text


class LastLine:
    """sys.stderr that remembers the last non-blank line written through it (everything still goes
    to the stream: the rank's log)."""

    def __init__(self, stream):
        self.stream = stream
        self._last = ""
        self._open = ""  # the line being written, not ended yet

    def write(self, text: str) -> int:
        lines = (self._open + text).split("\n")
        self._open = lines[-1][-1000:]
        ended = [line.strip() for line in lines[:-1] if line.strip()]
        if ended:
            self._last = ended[-1][-1000:]
        return self.stream.write(text)

    def line(self) -> str:
        return self._open.strip() or self._last

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def one_line_error(e: BaseException, rec) -> str:
    """'ValueError: boom (train.py:12 in step)': the exception and the deepest user frame. A
    failure caused by a peer's death (a ChannelError, even one that torch's pipelining or the
    program re-raised as its own RuntimeError) is said as that ChannelError, so the verdict
    (record/result.py) shows the peer's real error first."""
    e = _shown(e)
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    where = raised_at(traceback.extract_tb(e.__traceback__), rec.attribution)
    text = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    if isinstance(e, (TypeError, RuntimeError)) and "RankInt" in msg:  # torch's C++ takes only a plain int
        from tracer.local.rank_values import LAST_READ, refusal

        text = str(refusal(LAST_READ[0] or "a rank read", f"passed where torch takes one Python int ({msg})"))
    if isinstance(e, TypeError) and "tracer.local.rank_uses" in sys.modules:  # a rank value met a binding
        binding = sys.modules["tracer.local.rank_uses"].refusal_of_binding(e)
        if binding is not None:
            return binding
    if isinstance(e, AssertionError) and PER_RANK_PYTHON_VALUE in msg:  # LocalTensor's own words
        text = (
            "a Python number read from a tensor whose value differs across ranks (float(loss), .item(), "
            ".tolist()): local mode runs one Python for every rank, so it cannot hold one value per rank; "
            f"reduce it first (dist.all_reduce) or record with {OTHER_MODES}"
        )
    if type(e).__name__.endswith("DynamoError") and PER_RANK_SIZE in msg:  # dynamo meets a per-rank size
        text = (
            "torch.compile met a size held per simulated rank (LocalTensor's per-rank "
            "SymInt, which dynamo cannot trace in torch 2.13): local mode cannot compile this region; "
            f"record with {OTHER_MODES}"
        )
    return f"{text} ({where})" if where else text


def raised_at(tb: traceback.StackSummary, attribution) -> str:
    """Where an exception was raised, as an op's frame is named: the user's line (the innermost
    frame of the program's own code), then the library's line that raised, where that is
    another (`train.py:30 in main via deepspeed/runtime/zero/utils.py:92 in assert_...`)."""
    first = ""
    for fs in reversed(tb):
        code_where = attribution._describe(_Code(fs.filename, fs.name))
        if code_where is None:
            continue
        line = code_where.format(fs.lineno)
        if attribution.is_program(fs.filename):
            return f"{line}{FRAME_VIA}{first}" if first else line
        first = first or line
    return first


def _shown(e: BaseException) -> BaseException:
    """The exception a rank's error is said as: a ChannelError it was caused by (a peer's
    death), else itself."""
    from tracer.fake.channel import ChannelError

    cause: BaseException | None = e
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ChannelError):
            return cause
        cause = cause.__cause__ or cause.__context__
    return e


def whole_error(e: BaseException, line: str) -> str | None:
    """The whole error, where its message has more lines than the first: `line` (one_line_error's)
    and then every further line of the message (a framework's check that prints the two values
    it compared on the lines after its first: DeepSpeed's list-length disagreement). None where
    the message is one line: the end record keeps `line` alone."""
    rest = str(_shown(e)).strip().splitlines()[1:]
    return "\n".join([line, *rest]) if rest else None


PER_RANK_SIZE = "'LocalIntNode' object has no attribute"
"""What dynamo raises when LocalTensorMode's per-rank SymInt reaches it (torch 2.13)."""

PER_RANK_PYTHON_VALUE = "rank results must be equal for all ranks"
"""What LocalTensorMode raises when a per-rank tensor value becomes one Python value."""


class _Code:
    """The two attributes Attribution._describe reads from a code object."""

    def __init__(self, filename: str, name: str):
        self.co_filename, self.co_name = filename, name
