"""Calls whose tensors carry values that the program's control flow reads: they run carried
(channel.py), so in fake mode a rank receives what its peers really sent.

- torch's object collectives: a pickled object travels as a size tensor and a byte tensor
  through ordinary collectives / p2p, which are recorded as torch issues them;
- pipelining's warm-up vote (`PipelineStage` with or without `input_args`): stages multiply
  their "static shapes?" votes along the pipeline with int32 send / recv, and the schedule
  reads the result (`_warmup_p2p`: `result.item()`) to take shape inference (object p2p) or not.

Under fake compute (FakeTensorMode) these run with the fake mode lifted: their tensors are
small CPU metadata whose values are the point. Tensor data of the program (activations,
gradients, collectives) stays mirrored.
"""

from __future__ import annotations

import functools

import torch.distributed.distributed_c10d as c10d
from torch._subclasses.fake_tensor import unset_fake_temporarily

from tracer.capture.patches import Patcher
from tracer.fake import channel

OBJECT_APIS = (
    "broadcast_object_list",
    "all_gather_object",
    "gather_object",
    "scatter_object_list",
    "send_object_list",
    "recv_object_list",
)
"""c10d functions that move Python objects."""

HANDSHAKES = (
    ("torch.distributed.pipelining.schedules", "_PipelineSchedule", "_warmup_p2p"),
    ("torch.distributed.pipelining.stage", "PipelineStage", "_warmup_forward_vote"),
    ("torch.distributed.pipelining.stage", "PipelineStage", "_warmup_backward_result"),
)
"""(module, class, method): tensor exchanges whose values decide control flow."""


def carried(fn, label: str):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with channel.carry(label), unset_fake_temporarily():
            return fn(*args, **kwargs)

    return wrapper


def install(p: Patcher) -> None:
    """Fake mode: run the object APIs and the pipeline handshake carried."""
    import importlib

    for name in OBJECT_APIS:
        orig = getattr(c10d, name)
        p.everywhere(orig, carried(orig, name))
    for mod_name, cls_name, meth in HANDSHAKES:
        cls = getattr(importlib.import_module(mod_name), cls_name, None)
        if cls is not None and hasattr(cls, meth):
            p.set(cls, meth, carried(getattr(cls, meth), f"{cls_name}.{meth}"))
