"""Compute-free recording (`--compute fake`): the program's tensor math runs under
FakeTensorMode, so every aten op only propagates shapes and dtypes (no data, no FLOPs), while
everything that decides what is communicated still runs: process groups, DeviceMesh, and the
Python bookkeeping of FSDP2, DTensor / tensor parallel and pipelining.

Outside the fake mode (their bodies index the mesh tensor, whose values are ranks): process
group creation, `init_device_mesh` and every DeviceMesh method.

How collectives are seen under it:
- c10d ops (`dist.all_reduce`, FSDP2's all-gathers and reduce-scatters, p2p, batches) have no
  Meta kernel: they reach the recording process group with the fake tensors as they are, and
  are recorded exactly as with real compute;
- functional collectives (DTensor redistributions, TP) do have Meta kernels, which would answer
  them without a process group: they are recorded here (described as the LocalTensor capture
  describes them), then answered by the Meta kernel; their `wait_tensor` records the wait;
- torch treats any active fake mode as "compiling" and would wait on every functional
  collective at once; a fake-compute recording is not compiling, so waits stay where a real
  run has them.

What it cannot see: facts computed from tensor values (`.item()`, `.tolist()`, `bool(t)`,
data-dependent output shapes such as `nonzero` or `bincount`), e.g. MoE all_to_all split sizes
computed from the routing. FakeTensorMode raises on them; `run_job` then exits with
NEEDS_REAL_COMPUTE and the recorder re-runs that rank with real compute. A rank that finishes
under fake compute never read a tensor value, so its comm pattern does not depend on one.
"""

from __future__ import annotations

import functools
import inspect
import sys

import torch
import torch.distributed.distributed_c10d as c10d
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    unset_fake_temporarily,
)

from tracer.capture import dispatched  # how a functional collective's arguments become a Call
from tracer.capture.patches import Patcher
from tracer.capture.recorder import Recorder

# what a rank raises when the program reads tensor values, which fake compute does not have
DATA_DEPENDENT = (DataDependentOutputException, DynamicOutputShapeException)


class FakeCompute(FakeTensorMode):
    """FakeTensorMode that records functional collectives (see the module docstring)."""

    def __init__(self, rec: Recorder):
        # real tensors created before the mode (mesh tensors, the program's constants) are
        # allowed in: they are treated as constants of a fake computation
        super().__init__(allow_non_fake_inputs=True)
        self._rec = rec
        # storage of a functional collective's output -> its event indices; the wait comes
        # through another tensor over the same storage (the autograd wrapper's), as in local mode's ops
        self._pending: dict[int, dict[int, int]] = {}
        self._busy = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns = func.namespace
        if ns not in ("_c10d_functional", "_dtensor") or self._busy:
            return super().__torch_dispatch__(func, types, args, kwargs)
        name = func._schema.name
        if name == "_c10d_functional::_wrap_tensor_autograd":
            # the real kernel wraps the output as an AsyncCollectiveTensor, which waits when it
            # is first used; the Meta kernel returns a plain copy that never waits
            from torch.distributed._functional_collectives import AsyncCollectiveTensor

            return AsyncCollectiveTensor(args[0])
        if name == "_c10d_functional::wait_tensor":
            indices = self._pending.pop(_storage_key(args[0]), None)
            if indices:
                self._rec.waited(indices)
            return super().__torch_dispatch__(func, types, args, kwargs)
        if name not in dispatched.FUNCTIONAL:
            return super().__torch_dispatch__(func, types, args, kwargs)
        for t in dispatched.flat(args) + dispatched.flat(list((kwargs or {}).values())):
            # a fake tensor made from a Python constant (`torch.tensor(n)`) keeps its value, and
            # an op on constants only runs for real: the real collective would then reach the
            # process group and be recorded a second time
            if isinstance(t, FakeTensor) and t.constant is not None:
                t.constant = None
        self._busy = True  # a Meta kernel built on other collectives is recorded once
        try:
            result = super().__torch_dispatch__(func, types, args, kwargs)
        finally:
            self._busy = False
        if result is NotImplemented:  # a tensor subclass argument (torchao's Float8TrainingTensor)
            return result  # handles it: it unwraps and calls the op again, which is recorded then
        a = dispatched.arguments(func, args, kwargs or {})
        indices = self._rec.record(dispatched.describe(name, a, result))
        for t in dispatched.flat(result):
            if isinstance(t, torch.Tensor):
                self._pending[_storage_key(t)] = indices
        return result


def _storage_key(t) -> int:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, AttributeError):
        return id(t)


def _outside(fn):
    """`fn` run with the fake mode lifted: its tensors are real (mesh ranks, group members)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with unset_fake_temporarily():
            return fn(*args, **kwargs)

    return wrapper


def install(p: Patcher) -> None:
    """Run group and mesh construction outside the fake mode; keep functional collectives async.
    Call after patches.install (these wrap the recording hooks)."""
    from torch.distributed import _functional_collectives as funcol
    from torch.distributed import device_mesh

    fns = (c10d.init_process_group, c10d.new_group, c10d.split_group, device_mesh.init_device_mesh)
    _replace_by_reference(p, {id(fn): _outside(fn) for fn in fns})
    p.set(c10d, "_new_group_with_tag", _outside(c10d._new_group_with_tag))
    cls = device_mesh.DeviceMesh
    for attr, value in list(vars(cls).items()):
        if attr in _MESH_ACCESSORS:
            continue
        if isinstance(value, property):
            p.set(cls, attr, property(_outside(value.fget)))
        elif isinstance(value, staticmethod):
            p.set(cls, attr, staticmethod(_outside(value.__func__)))
        elif inspect.isfunction(value):
            p.set(cls, attr, _outside(value))

    orig = funcol._are_we_tracing

    def _are_we_tracing() -> bool:
        mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
        if isinstance(mode, FakeCompute):
            with unset_fake_temporarily():
                return orig()
        return orig()

    p.everywhere(orig, _are_we_tracing)


# DeviceMesh accessors DTensor calls on every op (~8k calls per rank): plain Python over ints
# and layouts, no tensor, so they need no lifting of the fake mode (which cost ~10 % of a rank)
_MESH_ACCESSORS = frozenset(
    {
        "__eq__",
        "__hash__",
        "_hash_key",
        "size",
        "ndim",
        "shape",
        "device_type",
        "mesh_dim_names",
        "get_coordinate",
        "_is_current_rank_part_of_mesh",
        "_sym_get_coordinate",
        "__getstate__",
        "__setstate__",
    }
)

# modules that cannot hold a program's reference to a group or mesh constructor
_SKIP = ("torch.", "numpy", "sympy", "polars", "msgpack", "rich", "typer")


def _replace_by_reference(p: Patcher, new: dict[int, object]) -> None:
    """Replace functions (by id) wherever a loaded module holds them by name: torch's own
    modules, and the program's `from torch.distributed.device_mesh import init_device_mesh`
    (init_device_mesh creates its rank map with torch.arange, which must not be fake)."""
    for name, mod in list(sys.modules.items()):
        if name.startswith(_SKIP) and not name.startswith("torch.distributed"):
            continue
        d = getattr(mod, "__dict__", None)
        for attr, value in list(d.items()) if isinstance(d, dict) else ():
            if id(value) in new:
                p.set(mod, attr, new[id(value)])


def is_data_dependent(err: BaseException) -> bool:
    """Whether `err` (or what caused it) is fake compute meeting a value it does not have."""
    seen = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        if isinstance(e, DATA_DEPENDENT):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False
