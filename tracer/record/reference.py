"""`tracer record ... --numerics --reference N`: the same program recorded a second time at world
size N (1: the single-process run), next to the layout's trace, for `analyzer numerics` to
compare. The program defines what it computes at N ranks (its global batch, its init): see
docs/numerics.md, "One command"."""

from __future__ import annotations

import dataclasses
import os

from tracer.record.options import RecordOptions

SUFFIX = ".ref.trace"


def reference_path(out: str) -> str:
    """OUT.trace -> OUT.ref.trace (beside the layout's trace)."""
    return (out[: -len(".trace")] if out.endswith(".trace") else out) + SUFFIX


def reference_options(asked: RecordOptions, layout_out: str, world: int) -> RecordOptions:
    """The layout's options at `world` ranks, every rank recorded, with numerics, written to
    reference_path(layout_out); ValueError (one line) where no reference can be derived."""
    if world < 1:
        raise ValueError(f"--reference must be a world size of at least 1, got {world}")
    if asked.config is not None or asked.torchtitan is not None:
        raise ValueError(
            "--reference takes a --script or --entrypoint program; a CONFIG.toml's 1-rank twin is its own "
            "config ([tracer] twin_of_dp, docs/numerics.md): record both and run analyzer numerics"
        )
    if asked.mode in (None, "fake", "fake_backend"):
        raise ValueError("--reference compares real values: add --mode real (or --mode local for an SPMD program)")
    out = reference_path(layout_out)
    if os.path.abspath(out) in {os.path.abspath(p) for p in (asked.script or "", layout_out) if p}:
        raise ValueError(f"--reference would write {out}, which is an input or the layout's trace")
    return dataclasses.replace(asked, world_size=world, out=out, ranks=None, numerics=True)
