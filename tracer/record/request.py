"""One recording, resolved: RecordRequest says what runs, on how many ranks, how, and where the
trace goes. tracer/record/build.py makes one from a command line (and a TOML); tests, bench/
and `tracer golden` make theirs directly. `check` is where a request is validated, once, before
any process starts (tracer/record/pipeline.py calls it).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field

from traceformat.format import Mode
from traceformat.output import OutputError, parts_folder, probe, refuse_inputs
from tracer.executors import EXECUTORS
from tracer.program import Program
from tracer.record.sharing import SharePlan

INSTALL_TORCH = "pip install torch==2.13.0 (pin it: an unpinned torch can pull a multi-GB CUDA build)"


@dataclass(kw_only=True, slots=True)
class RecordRequest:
    program: Program
    """What every rank runs: a script, an entrypoint, or the built-in workload's entrypoint."""
    world_size: int
    """Simulated ranks."""
    out: str
    """The trace to write; its ranks stream into OUT.parts/ meanwhile."""
    mode: str = "fake"
    """"fake" (a process per rank, the fake backend), "local" (one process, LocalTensorMode) or
    "real" (a process per rank on real gloo)."""
    ranks: list[int] | None = None
    """Ranks to put in the trace; None: all of them."""
    config: dict = field(default_factory=dict)
    """Snapshot for the trace header (the job config, its file, the TorchTitan job)."""
    compute: str = "real"
    """Tensor math: "real" or "fake" (fake mode only; tracer/record/compute.py resolves "auto")."""
    compute_why: str = ""
    """Why that compute, kept in the trace header."""
    timeout: float | None = None
    """Kill a rank after this many seconds; None: never."""
    jobs: int | None = None
    """Ranks recorded at once; None: one per core (or the Ray cluster's CPUs)."""
    executor: str = "local"
    """Where ranks run: "local" (process pool) or "ray" (tracer/executors)."""
    ray_address: str | None = None
    """The Ray cluster of the ray executor (None: $RAY_ADDRESS, else a local one)."""
    share: SharePlan | None = None
    """Record only its representatives and verification ranks, derive the other asked ranks by
    relabelling (tracer/record/sharing.py; fake mode)."""
    numerics: bool = False
    """Record numerics digests per step (--numerics; local or real mode: tracer/numerics/)."""
    progress: bool = True
    """A progress bar on a terminal."""

    @property
    def asked(self) -> list[int]:
        """The ranks the trace holds."""
        return list(range(self.world_size)) if self.ranks is None else self.ranks

    @property
    def parts_dir(self) -> str:
        return parts_folder(self.out)

    def check(self) -> None:
        """Everything the recording needs, checked before any process starts (ValueError, one line)."""
        self.program.check()
        check_numbers(world_size=self.world_size, ranks=self.ranks, timeout=self.timeout, jobs=self.jobs)
        if Mode.of(self.mode) not in (Mode.FAKE, Mode.LOCAL, Mode.REAL):
            raise ValueError(f"--mode must be fake, local or real, got {self.mode!r}")
        if self.mode == "real":
            check_real(self)
        if self.compute not in ("fake", "real"):
            raise ValueError(f"--compute must be fake or real, got {self.compute!r}")
        if self.compute == "fake" and self.mode != "fake":
            raise ValueError("--compute fake needs --mode fake (local mode computes every rank with LocalTensor)")
        if self.numerics and self.mode not in ("local", "real"):
            raise ValueError("--numerics needs --mode local or --mode real (fake mode computes no real values)")
        if self.executor not in EXECUTORS:
            raise ValueError(f"--executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        check_output(self.out, self.program, self.config.get("config_file"))
        check_torch(self.executor)


def check_numbers(
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


def check_real(request: RecordRequest) -> None:
    """What real mode cannot do, said before any process starts: its ranks wait on each other on
    real gloo, so they all run at once, on this machine (the FileStore they share lies in the
    parts folder)."""
    n = request.world_size
    if request.jobs is not None and request.jobs < n:
        raise ValueError(
            f"--mode real runs all {n} ranks at once (each waits for its peers on real gloo): "
            f"-j {request.jobs} would leave ranks waiting for peers that never start; leave -j out"
        )
    if request.executor != "local":
        raise ValueError("--mode real runs its ranks on this machine (--executor local): the ranks share one store")


def check_output(out: str, program: Program, config_file: str | None = None) -> None:
    """The trace, and the parts folder the ranks stream into (emptied first), never hold the
    program or its config, and can be written (OutputError, one line)."""
    inputs = [program.script, config_file]
    refuse_inputs(out, inputs)
    probe(out)
    parts_dir = parts_folder(out)
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
