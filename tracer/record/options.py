"""What `tracer record` was asked on its command line (RecordOptions), and the one precedence
rule by which those options, a TOML's keys and the defaults become a RecordRequest (pick):
the command line over the TOML over the default, as TorchTitan's ConfigManager does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from tracer.record.request import check_numbers

T = TypeVar("T")


def pick(*values: T | None, default: T) -> T:
    """The first given of `values` (the command line's, then the TOML's), else `default`; None
    and an empty string mean "not given"."""
    for value in values:
        if value is not None and value != "":
            return value
    return default


@dataclass(kw_only=True, slots=True)
class RecordOptions:
    config: str | None = None
    """A CONFIG.toml: the built-in workload, its [job] script / entrypoint, or a TorchTitan job."""
    script: str | None = None
    """--script FILE.py: run as `python FILE.py ARGS` on every rank."""
    entrypoint: str | None = None
    """--entrypoint package.module:function."""
    torchtitan: str | None = None
    """--torchtitan MODULE:CONFIG: the installed TorchTitan trainer."""
    args: list[str] = field(default_factory=list)
    """Arguments after `--`: the program's (TorchTitan's `--section.key value` overrides)."""
    world_size: int | None = None
    """-n: simulated ranks (over [tracer] world_size)."""
    steps: int | None = None
    """--steps: optimizer steps of a CONFIG.toml or --torchtitan job."""
    mode: str | None = None
    """--mode: fake or local (or fake_backend / local_tensor)."""
    ranks: str | None = None
    """--ranks: "all" or e.g. "0,3,8-15" (over [tracer] ranks)."""
    share: bool = True
    """Share the recording between ranks identical up to relabelling where it applies (not --all-ranks)."""
    out: str | None = None
    """-o: the trace (over [tracer] output)."""
    timeout: float | None = None
    """--timeout: kill a rank after this many seconds."""
    jobs: int | None = None
    """-j: ranks recorded at once."""
    compute: str | None = None
    """--compute: real, fake or auto (over [tracer] compute)."""
    numerics: bool | None = None
    """--numerics: record numerics digests (local or real mode; over [tracer] numerics)."""
    executor: str = "local"
    """--executor: local or ray."""
    ray_address: str | None = None
    """--ray-address: the Ray cluster of --executor ray."""

    def check(self) -> None:
        """The options on their own, before anything is read: the numbers, and --steps
        (ValueError, one line)."""
        check_numbers(world_size=self.world_size, timeout=self.timeout, jobs=self.jobs)
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"--steps must be at least 1, got {self.steps}")
        if self.steps is not None and self.config is None and self.torchtitan is None:
            raise ValueError("--steps applies to a CONFIG.toml or --torchtitan (a script counts its own steps)")
