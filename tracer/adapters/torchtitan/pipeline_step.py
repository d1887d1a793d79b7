"""TorchTitan 0.3's pipeline-schedule call, on torch 2.13's schedules.

TorchTitan 0.3 hands its pipeline schedule microbatches it has already cut
(`pp_schedule.step(arg_mbs=..., kwarg_mbs=..., target_mbs=..., losses=..., loss_kwargs=...)`),
the calling convention of a newer torch. torch 2.13's `step(*args, target=None, **kwargs)`
takes a whole batch and cuts it itself: the three lists fall into `**kwargs` as model keyword
arguments and the schedule then finds one microbatch where it expects n ("Expecting 2 arg_mbs
but got 1"). `install()` lets `step` take the microbatch lists: the same per-iteration set-up
as torch 2.13's own `step` (has_backward on every stage, runtime state cleared), then the
schedule's `_step_microbatches` on the lists as given, so the pipeline's sends, receives and
the FSDP / TP collectives inside each stage are torch's and TorchTitan's, unchanged. A call
without the lists is torch's own `step`. torch's `eval` (TorchTitan's validator) calls `step`
with `target=None` next to the lists: forward only, the same way.
"""

from __future__ import annotations

import functools

import torch

MICROBATCH_KEYS = ("arg_mbs", "kwarg_mbs", "target_mbs")
"""Keywords of the microbatch-list convention."""


def _stages(schedule) -> list:
    stages = getattr(schedule, "_stages", None)
    return list(stages) if stages is not None else [schedule._stage]


def _with_microbatches(step):
    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        if not any(k in kwargs for k in MICROBATCH_KEYS):
            return step(self, *args, **kwargs)
        if args:
            raise TypeError("pipeline step: positional inputs and arg_mbs / kwarg_mbs / target_mbs together")
        arg_mbs, kwarg_mbs, target_mbs = (kwargs.pop(k, None) for k in MICROBATCH_KEYS)
        losses = kwargs.pop("losses", None)
        return_outputs = kwargs.pop("return_outputs", True)
        loss_kwargs = kwargs.pop("loss_kwargs", None)
        if kwargs.get("target", 0) is None:  # torch's eval() (the validator's) passes target=None on
            kwargs.pop("target")
        if kwargs:
            raise TypeError(f"pipeline step: unexpected keyword arguments {sorted(kwargs)}")
        needs_autograd = getattr(self, "_backward_requires_autograd", True)
        if self._has_backward and needs_autograd and not torch.is_grad_enabled():
            raise RuntimeError("step() requires gradients to be enabled for backward computation")
        stages = _stages(self)
        for stage in stages:
            stage.has_backward = self._has_backward
            stage.clear_runtime_states()
        self._step_microbatches(arg_mbs, kwarg_mbs, target_mbs, losses, return_outputs, loss_kwargs=loss_kwargs)
        for stage in stages:
            if stage.is_last and return_outputs:
                return self._merge_outputs(stage.output_chunks)
        return None

    wrapper.__commtrace_microbatches__ = True  # type: ignore[attr-defined]  # a mark on the function object
    return wrapper


def install() -> None:
    """Give torch's single- and multi-stage schedules' `step` the microbatch-list form (once;
    not at all on a torch whose `step` already takes it)."""
    import inspect

    from torch.distributed.pipelining import schedules

    for cls in (schedules.PipelineScheduleSingle, schedules.PipelineScheduleMulti):
        step = cls.__dict__["step"]
        if getattr(step, "__commtrace_microbatches__", False) or "arg_mbs" in inspect.signature(step).parameters:
            continue
        cls.step = _with_microbatches(step)
