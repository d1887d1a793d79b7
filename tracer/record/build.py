"""The one RecordRequest of a `tracer record` command line: what it records decides the route
(--torchtitan, a CONFIG.toml, --script / --entrypoint); every route takes each value by the one
precedence of options.pick (the command line over the TOML over the default). Bad input is a
ValueError with one line (the CLI exits 2 on it); `note` receives the lines worth saying on
the way (how many steps, why ranks are not shared, ...), as they come.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from traceformat.ranks import parse_ranks
from tracer import config as config_mod
from tracer.adapters.torchtitan import request as torchtitan_request
from tracer.modes import ALIASES
from tracer.program import Program
from tracer.record import sharing
from tracer.record.compute import resolve as resolve_compute
from tracer.record.options import RecordOptions, pick
from tracer.record.request import RecordRequest

Note = Callable[[str], None]


def build(asked: RecordOptions, note: Note) -> RecordRequest:
    asked.check()  # the numbers first: nothing is read or started with a bad one
    if asked.steps is not None and (asked.torchtitan is not None or _has_torchtitan(asked.config)):
        # TorchTitan's own knob
        asked = dataclasses.replace(asked, args=[*asked.args, "--training.steps", str(asked.steps)], steps=None)
    if asked.torchtitan is not None:
        if asked.config is not None or asked.script is not None or asked.entrypoint is not None:
            raise ValueError("give --torchtitan MODULE:CONFIG alone (not with a CONFIG.toml, --script or --entrypoint)")
        return torchtitan_request.from_spec(asked, note)
    if asked.config is not None:
        if asked.script is not None or asked.entrypoint is not None:
            raise ValueError("give a CONFIG.toml or --script / --entrypoint, not both (use [job] script in the TOML)")
        return torchtitan_request.from_toml(asked, note) or _from_config(asked, note)
    return _from_program(asked)


def _has_torchtitan(path: str | None) -> bool:
    """Whether a TOML has `[job] torchtitan` (bad TOML: False, its own error comes later)."""
    if path is None:
        return False
    try:
        job = config_mod.read_toml(path).get("job")
    except ValueError:
        return False
    return isinstance(job, dict) and "torchtitan" in job


def check_mode(mode: str | None) -> None:
    if mode is not None and mode not in ALIASES:
        raise ValueError(f"--mode must be fake, local or real (or fake_backend / local_tensor), got {mode!r}")


def _from_program(asked: RecordOptions) -> RecordRequest:
    """--script FILE.py / --entrypoint pkg.mod:fn."""
    mode = pick(asked.mode, default="fake")
    if (asked.script is None) == (asked.entrypoint is None):
        raise ValueError("give exactly one of --script FILE.py or --entrypoint pkg.mod:fn")
    if asked.world_size is None:
        raise ValueError("--world-size is required")
    check_mode(mode)
    program = Program(script=asked.script, entrypoint=asked.entrypoint, args=list(asked.args))
    program.check()
    ranks = parse_ranks(pick(asked.ranks, default="all"), asked.world_size)
    used, why = resolve_compute(pick(asked.compute, default="auto"), ALIASES[mode])
    name = os.path.splitext(os.path.basename(asked.script))[0] if asked.script else str(asked.entrypoint).split(":")[-1]
    return RecordRequest(
        program=program,
        world_size=asked.world_size,
        out=pick(asked.out, default=name + ".trace"),
        mode=ALIASES[mode],
        ranks=ranks,
        compute=used,
        compute_why=why,
        timeout=asked.timeout,
        jobs=asked.jobs,
        executor=asked.executor,
        ray_address=asked.ray_address,
        numerics=pick(asked.numerics, default=False),
    )


def _from_config(asked: RecordOptions, note: Note) -> RecordRequest:
    """A CONFIG.toml of the built-in workload (or its [job] script / entrypoint)."""
    path = str(asked.config)
    if asked.args:
        raise ValueError(f"unexpected arguments after the config: {' '.join(asked.args)} (use [job] args in the TOML)")
    check_mode(asked.mode)
    try:  # -n and --steps go into the TOML's [tracer] before it is checked: its degrees depend on them
        cfg = config_mod.load(path, world_size=asked.world_size, steps=asked.steps)
        program = config_mod.program(cfg)
        program.check()
        ranks = parse_ranks(pick(asked.ranks, default=config_mod.ranks_spec(cfg)), cfg.world_size)
        mode = ALIASES[pick(asked.mode, default=cfg.comm.mode)]
        config_mod.check_mode(cfg, mode)
        used, why = resolve_compute(pick(asked.compute, default=cfg.tracer.compute), mode, cfg)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    if cfg.builtin:
        note(cfg.steps_why())
        for line in config_mod.notes(cfg):
            note(line)
    plan = None
    if asked.share:
        plan, not_shared = sharing.plan(cfg, mode=mode, compute=used, ranks=ranks, cores=asked.jobs)
        if plan is None and not_shared.startswith(sharing.UNEVEN):
            note(f"recording every rank: {not_shared}")
    return RecordRequest(
        program=program,
        world_size=cfg.world_size,
        out=pick(asked.out, cfg.tracer.output, default=os.path.splitext(os.path.basename(path))[0] + ".trace"),
        mode=mode,
        ranks=ranks,
        config=dict(cfg.to_dict(), config_file=path),
        compute=used,
        compute_why=why,
        share=plan,
        timeout=asked.timeout,
        jobs=asked.jobs,
        executor=asked.executor,
        ray_address=asked.ray_address,
        numerics=pick(asked.numerics, cfg.tracer.numerics, default=False),
    )
