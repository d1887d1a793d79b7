"""DistributedDataParallel under a recording (torch 2.13): what the recording backend alone does
not cover.

Both modes: `register_comm_hook` refuses the bf16 compression hook unless this machine's torch
is a CUDA build with NCCL >= 2.10. A recording simulates the cluster the program was written
for, whose backend (here the recording one) all-reduces bf16, so the check is made as if on it;
every other check on the hook (callable, annotations) still runs.

Local mode and `--compute fake`: DDP's C++ side exchanges host metadata with collectives and
reads it back through raw data pointers: `_verify_params_across_processes` (at construction: an
all-gather of the parameter count and a broadcast of every parameter's sizes and strides) and
`Reducer._rebuild_buckets` (after the first iteration: two broadcasts of the rebuilt bucket
layout). Under LocalTensorMode (FakeTensorMode) every factory call, these C++ scratch tensors
included, returns a LocalTensor (FakeTensor), which has no storage of its own, so the reads
fail with "The tensor has a non-zero number of elements, but its data is not allocated yet".

In those two calls, integer tensors made from nothing (no tensor argument) are that metadata:
they are made as plain tensors, identical on every simulated rank as they are in an SPMD
program, and the collectives that carry them are still recorded (local mode's ops see every c10d op,
plain or local; the recording backend takes any tensor). Everything else, the gradient buckets
included, stays local (fake).
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from tracer.capture.patches import Patcher


class _HostMetadata(TorchDispatchMode):
    """Above LocalTensorMode / FakeTensorMode: integer factory tensors are made plain, outside
    that mode (`outside` is the context manager that steps out of it)."""

    def __init__(self, outside):
        super().__init__()
        self._outside = outside

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        if tensors:  # an op on metadata stays plain (FakeTensorMode would fake it)
            plain = all(type(t) is torch.Tensor for t in tensors)
        else:  # a factory: integer ones make metadata, the others (gradient buckets) stay in the mode
            dtype = kwargs.get("dtype")
            plain = (
                isinstance(dtype, torch.dtype)
                and not dtype.is_floating_point
                and not dtype.is_complex
                and dtype != torch.bool
            )
        if plain:
            with self._outside():
                return func(*args, **kwargs)
        return func(*args, **kwargs)


def _outside_of_mode():
    """How to step out of the mode that would make storage-less tensors, or None."""
    from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
    from torch.distributed._local_tensor import enabled_local_tensor_mode
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    lm = enabled_local_tensor_mode()
    if lm is not None:
        return lm.disable
    if any(isinstance(m, FakeTensorMode) for m in _get_current_dispatch_mode_stack()):
        return unset_fake_temporarily
    return None


def _host_metadata(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        outside = _outside_of_mode()
        if outside is None:
            return fn(*args, **kwargs)
        with _HostMetadata(outside):
            return fn(*args, **kwargs)

    return wrapper


_BF16_HOOKS = ("bf16_compress_hook", "bf16_compress_wrapper_hook")


def install(p: Patcher) -> None:
    from torch.nn.parallel import DistributedDataParallel

    orig_check = DistributedDataParallel._check_comm_hook

    @functools.wraps(orig_check)
    def _check_comm_hook(self, hook):
        if getattr(hook, "__name__", None) in _BF16_HOOKS:

            @functools.wraps(hook)
            def as_on_the_cluster(*args, **kwargs):
                return hook(*args, **kwargs)

            as_on_the_cluster.__name__ = "recorded_" + hook.__name__  # skips only the CUDA/NCCL probe
            return orig_check(self, as_on_the_cluster)
        return orig_check(self, hook)

    p.set(DistributedDataParallel, "_check_comm_hook", _check_comm_hook)
    p.set(dist, "_verify_params_across_processes", _host_metadata(dist._verify_params_across_processes))
    p.set(dist.Reducer, "_rebuild_buckets", _host_metadata(dist.Reducer._rebuild_buckets))
