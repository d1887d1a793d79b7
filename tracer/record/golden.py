"""Golden comm patterns of the shipped examples, re-recorded: `tracer golden check` records every
example and compares it with its golden (by running `analyzer golden check` on the recordings:
the recorder imports nothing from the analyzer); `tracer golden update` rewrites traces/ on
purpose (canonical, see traceformat/golden.py).
"""

from __future__ import annotations

import os
import re

from traceformat.golden import examples, golden_path, matched, write_golden
from traceformat.output import cannot_write
from traceformat.ranks import parse_ranks
from tracer import config as config_mod
from tracer.modes import ALIASES
from tracer.program import Program
from tracer.record.pipeline import record
from tracer.record.request import RecordRequest
from tracer.record.result import failure_lines

DEFAULT_SCRIPT_WORLD_SIZE = 4
_WORLD_SIZE_IN_DOC = re.compile(r"--world-size\s+(\d+)")


def script_world_size(path: str) -> int:
    """A script is recorded at the first `--world-size N` its own text shows (its usage line),
    else 4: the example documents how it is meant to run."""
    with open(path) as f:
        m = _WORLD_SIZE_IN_DOC.search(f.read())
    return int(m.group(1)) if m else DEFAULT_SCRIPT_WORLD_SIZE


def record_example(path: str, out: str, root: str) -> None:
    """Record one example as `tracer record` would; ValueError (one line) when it fails."""
    if path.endswith(".toml"):
        cfg = config_mod.load(path)
        mode = ALIASES[cfg.comm.mode]
        config_mod.check_mode(cfg, mode)
        request = RecordRequest(
            program=config_mod.program(cfg),
            world_size=cfg.world_size,
            out=out,
            mode=mode,
            ranks=parse_ranks(config_mod.ranks_spec(cfg), cfg.world_size),
            config=dict(cfg.to_dict(), config_file=os.path.relpath(path, root)),
            progress=False,
        )
    else:
        request = RecordRequest(
            program=Program(script=path), world_size=script_world_size(path), out=out, progress=False
        )
    res = record(request)
    if res.errors:
        raise ValueError(f"{path}: {failure_lines(res.failures)[0]}")


def record_all(examples_dir: str, work_dir: str, only: set[str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Record every example (or those named in `only`) into work_dir: ({name: trace}, {name: error})."""
    root = os.path.dirname(os.path.abspath(examples_dir))
    traces, errors = {}, {}
    for name, path in examples(examples_dir):
        if only is not None and name not in only:
            continue
        trace = os.path.join(work_dir, name + ".trace")
        try:
            record_example(path, trace, root)
        except ValueError as e:
            errors[name] = str(e)
            continue
        traces[name] = trace
    return traces, errors


def update(examples_dir: str, traces_dir: str, traces: dict[str, str]) -> list[str]:
    """Rewrite traces_dir/<name>.trace from each recorded (or given) trace; the paths written.
    An OSError writing one (a read-only traces/, no space) is an OutputError naming it."""
    root = os.path.dirname(os.path.abspath(examples_dir))
    written = []
    for name, trace in matched(examples_dir, traces):
        path = golden_path(traces_dir, name)
        try:
            write_golden(trace, path, root)
        except OSError as e:
            raise cannot_write(path, e, "golden") from None
        written.append(path)
    return written
