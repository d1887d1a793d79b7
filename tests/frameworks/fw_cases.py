"""The framework programs of tests/programs/frameworks and how they are recorded (shared by
test_frameworks.py and make_truth.py)."""

from __future__ import annotations

import math
import os
import sys

import polars as pl

HERE = os.path.dirname(os.path.abspath(__file__))
FRAMEWORKS = os.path.join(os.path.dirname(HERE), "programs", "frameworks")
BIN = os.path.dirname(sys.executable)
TORCHTUNE_TORCHAO = os.path.join(os.path.dirname(BIN), "torchtune-torchao")
"""torchtune 0.6.1 imports torchao APIs that torchao 0.16 removed; the project's float8 extra
pins torchao 0.18. The Makefile installs torchao 0.11 here (--target), first on PYTHONPATH for
the torchtune programs only."""

HEALTHY = {
    "megatron_tp": ("megatron.core", "megatron_tp", ()),
    "megatron_tp_no_gloo": ("megatron.core", "megatron_tp", ("--no-gloo-groups",)),
    "deepspeed_zero1": ("deepspeed", "deepspeed_zero", ("--stage", "1")),
    "deepspeed_zero2": ("deepspeed", "deepspeed_zero", ("--stage", "2")),
    "deepspeed_zero3": ("deepspeed", "deepspeed_zero", ("--stage", "3")),
    "accelerate": ("accelerate", "accelerate_ddp", ()),
    "hf_trainer": ("transformers", "hf_trainer", ()),
    "fabric_ddp": ("lightning", "fabric_ddp", ()),
    "fabric_model_parallel": ("lightning", "fabric_model_parallel", ()),
    "torchtune": ("torchtune", "torchtune_full_finetune", ()),
}
"""case: (the module it needs, its program, the program's arguments)."""


def env(program: str) -> dict:
    out = dict(os.environ, DS_ACCELERATOR="cpu", PYTHONWARNINGS="ignore")
    if program.startswith("torchtune"):
        out["PYTHONPATH"] = os.pathsep.join(p for p in (TORCHTUNE_TORCHAO, out.get("PYTHONPATH")) if p)
    return out


def tracer_command(program: str, args: tuple, mode: str, out: str, flags: tuple = ()) -> list[str]:
    cmd = [os.path.join(BIN, "tracer"), "record", "--script", os.path.join(FRAMEWORKS, program + ".py")]
    return [*cmd, "-n", "4", "--mode", mode, *flags, "--timeout", "300", "-o", out, "--", *args]


def pattern(trace, rank: int) -> list[list]:
    """The rank's [op, dtype, numel] sequence, waits left out (where a wait falls is timing)."""
    ev = trace.events.filter((pl.col("rank") == rank) & (pl.col("op") != "wait")).sort("idx")
    out = []
    for row in ev.iter_rows(named=True):
        shapes = trace.atom(row["in_shapes"]) or []
        out.append([row["op"], row["dtype"], sum(math.prod(s) for s in shapes)])
    return out
