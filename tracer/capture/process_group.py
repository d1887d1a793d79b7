"""The recording process group: the fake backend, with every call written down.

Registered as the c10d backend "commtrace". torch accepts a Python ProcessGroup subclass as a
backend, and every path that issues a collective ends in one of these methods: the c10d API
(incl. async_op), the functional collectives DTensor/TP use (through their C++ ops), FSDP2's
all-gather / reduce-scatter and the coalescing manager. Nothing is communicated; only the
metadata is recorded.

Unlike torch's fake backend, outputs are not left holding uninitialized memory: each collective
fills them as if every rank held this rank's data (an all-gather repeats the input, a
reduce-scatter takes this rank's chunk, ...). Garbage bytes are NaNs and negatives that make CPU
math 5-100x slower and can flip data-dependent control flow (inf checks, loss scaling); mirrored
data keeps a dry run's compute plausible at the price of one memcpy per collective.

Except where values decide control flow: fake mode sets `carry` so that inside an object
collective or a pipeline stage's vote (tracer/fake/object_collectives.py) the tensors really
travel between the rank processes (tracer/fake/channel.py, exchange.py), a recv's data
arriving at its wait(). Real mode (tracer/real/backend.py) subclasses this group.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import torch
import torch.distributed as dist

from traceformat.ops import OPS
from tracer.capture import arg_checks
from tracer.capture.recorder import Call, Recorder
from tracer.capture.work import RecordingWork

BACKEND = "commtrace"
_state = threading.local()  # set by the c10d send/recv wrappers: the p2p call is blocking


def reduce_name(op) -> str:
    """'sum', 'max', 'avg', ... from a ReduceOp, its RedOpType or a functional-collective string."""
    if isinstance(op, str):
        return op.lower()
    inner = getattr(op, "op", op)
    if isinstance(op, torch._C.ScriptObject):  # a boxed ReduceOp reached through the dispatcher
        inner = op.op()
        if isinstance(inner, int):
            inner = {int(v): k for k, v in dist.ReduceOp.RedOpType.__members__.items()}.get(inner, inner)
            return str(inner).lower()
    name = getattr(inner, "name", None) or str(inner).rsplit(".", 1)[-1]
    return name.lower()


@contextlib.contextmanager
def coalesced():
    """Backend calls inside come from a coalesced op (the coalescing manager's exit, the
    functional *_coalesced collectives): torch dispatched c10d's *_coalesced op, one tensor or
    many. Outside, a single tensor reaching the coalesced entry points came from a plain
    functional collective (torch's C++ implements it with the coalesced backend call)."""
    _state.coalesced = getattr(_state, "coalesced", 0) + 1
    try:
        yield
    finally:
        _state.coalesced -= 1


def coalescing() -> bool:
    return getattr(_state, "coalesced", 0) > 0


class RecordingProcessGroup(dist.ProcessGroup):
    """One process group of one simulated rank (or of rank 0's view in local mode)."""

    recorder: Recorder | None = None  # set by the mode before the program runs
    serve: Callable[..., dist.ProcessGroup] | None = None
    """real mode: the creator of its groups (tracer/real/backend.py); None: this class."""
    store: Callable[[], dist.Store] | None = None
    """real mode: opens the store every rank process shares (init_process_group's)."""
    carry: Callable[[RecordingProcessGroup, Recorder, Call, dict], RecordingWork | None] | None = None
    """fake mode: the Work of a call whose tensors really travel between the rank processes
    (tracer/fake/exchange.py: carry); None, or its None: the call's outputs are mirrored."""

    def __init__(self, rank: int, size: int, name: str):
        super().__init__(rank, size)
        self._name = name

    @property
    def group_name(self) -> str:
        return self._name

    def name(self) -> str:
        return BACKEND

    def getBackendName(self) -> str:
        return BACKEND

    def _check(self, op: str, ins=(), outs=(), **kw) -> None:
        """Raise what NCCL / Gloo raise for these arguments, before anything is recorded."""
        arg_checks.check(op, self.size(), self.rank(), ins, outs, **kw)

    def _go(self, call: Call) -> RecordingWork:
        rec = RecordingProcessGroup.recorder
        indices = rec.record(call) if rec is not None else {}
        carry = RecordingProcessGroup.carry
        work = carry(self, rec, call, indices) if rec is not None and carry is not None else None
        if work is not None:
            return work
        _mirror(call, self.rank(), self.size())  # only fake mode uses this group (see patches)
        outs = call.outputs if call.outputs or call.op == "barrier" else call.inputs
        # without a recorder (none installed) there is nothing to record the wait into either
        return RecordingWork(rec, indices, call.async_op, outputs=outs)  # type: ignore[arg-type]

    # --- collectives (argument layouts as torch's PyProcessGroup trampoline passes them) ---
    def allreduce(self, tensors, opts):
        return self._go(Call("all_reduce", self, tensors, tensors, reduce_name(opts.reduceOp), async_op=opts.asyncOp))

    def allreduce_coalesced(self, tensors, opts):
        self._check("all_reduce_coalesced", tensors)
        return self._go(
            Call("all_reduce_coalesced", self, tensors, tensors, reduce_name(opts.reduceOp), async_op=opts.asyncOp)
        )

    def allgather(self, output_lists, inputs, opts):
        self._check("all_gather", inputs, output_lists)
        return self._go(Call("all_gather", self, inputs, [t for ts in output_lists for t in ts], async_op=opts.asyncOp))

    def allgather_coalesced(self, output_lists, inputs, opts):
        self._check("all_gather_coalesced", inputs, output_lists)
        return self._go(
            Call("all_gather_coalesced", self, inputs, [t for ts in output_lists for t in ts], async_op=opts.asyncOp)
        )

    def all_gather_single(self, output, input, opts):
        self._check("all_gather_into_tensor", [input], [output])
        return self._go(Call("all_gather_into_tensor", self, [input], [output], async_op=opts.asyncOp))

    def _allgather_base(self, output, input, opts):
        return self.all_gather_single(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        # c10d.allgather_into_tensor_coalesced_, but torch's functional all_gather_into_tensor
        # (one tensor) reaches the backend here too: that one is the plain op (see coalescing)
        op = "all_gather_into_tensor_coalesced" if len(inputs) != 1 or coalescing() else "all_gather_into_tensor"
        self._check(op, inputs, outputs)
        return self._go(Call(op, self, list(inputs), list(outputs), async_op=opts.asyncOp))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts):
        return self.all_gather_single_coalesced(outputs, inputs, opts)

    def reduce_scatter(self, outputs, input_lists, opts):
        self._check("reduce_scatter", input_lists, outputs)
        return self._go(
            Call(
                "reduce_scatter",
                self,
                [t for ts in input_lists for t in ts],
                outputs,
                reduce_name(opts.reduceOp),
                async_op=opts.asyncOp,
            )
        )

    def reduce_scatter_single(self, output, input, opts):
        self._check("reduce_scatter_tensor", [input], [output])
        return self._go(
            Call("reduce_scatter_tensor", self, [input], [output], reduce_name(opts.reduceOp), async_op=opts.asyncOp)
        )

    def _reduce_scatter_base(self, output, input, opts):
        return self.reduce_scatter_single(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        op = "reduce_scatter_tensor_coalesced" if len(inputs) != 1 or coalescing() else "reduce_scatter_tensor"
        self._check(op, inputs, outputs)
        return self._go(Call(op, self, list(inputs), list(outputs), reduce_name(opts.reduceOp), async_op=opts.asyncOp))

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        return self.reduce_scatter_single_coalesced(outputs, inputs, opts)

    def broadcast(self, tensors, opts):
        self._check("broadcast", tensors, tensors, root=opts.rootRank)
        return self._go(Call("broadcast", self, tensors, tensors, root=opts.rootRank, async_op=opts.asyncOp))

    def reduce(self, tensors, opts):
        self._check("reduce", tensors, tensors, root=opts.rootRank)
        return self._go(
            Call(
                "reduce", self, tensors, tensors, reduce_name(opts.reduceOp), root=opts.rootRank, async_op=opts.asyncOp
            )
        )

    def gather(self, output_lists, inputs, opts):
        self._check("gather", inputs, output_lists, root=opts.rootRank)
        return self._go(
            Call(
                "gather",
                self,
                inputs,
                [t for ts in output_lists for t in ts],
                root=opts.rootRank,
                async_op=opts.asyncOp,
            )
        )

    def scatter(self, outputs, input_lists, opts):
        self._check("scatter", input_lists, outputs, root=opts.rootRank)
        return self._go(
            Call(
                "scatter",
                self,
                [t for ts in input_lists for t in ts],
                outputs,
                root=opts.rootRank,
                async_op=opts.asyncOp,
            )
        )

    def alltoall(self, outputs, inputs, opts):
        self._check("all_to_all", inputs, outputs)
        return self._go(Call("all_to_all", self, inputs, outputs, async_op=opts.asyncOp))

    def all_to_all_single(self, output, input, output_splits, input_splits, opts):
        self._check("all_to_all_single", [input], [output], splits=(input_splits, output_splits))
        return self._go(
            Call(
                "all_to_all_single",
                self,
                [input],
                [output],
                splits=(list(input_splits), list(output_splits)),
                async_op=opts.asyncOp,
            )
        )

    def alltoall_base(self, output, input, output_splits, input_splits, opts):
        return self.all_to_all_single(output, input, output_splits, input_splits, opts)

    def barrier(self, opts=None):
        return self._go(Call("barrier", self, async_op=bool(opts is not None and opts.asyncOp)))

    # --- p2p: blocking unless issued by isend / irecv / batch_isend_irecv ---
    def send(self, tensors, dst, tag):
        blocking = getattr(_state, "blocking", False)
        self._check("send", peer=dst)
        return self._go(Call("send", self, tensors, [], peer=dst, tag=tag, async_op=not blocking))

    def recv(self, tensors, src, tag):
        blocking = getattr(_state, "blocking", False)
        self._check("recv", peer=src)
        return self._go(Call("recv", self, [], tensors, peer=src, tag=tag, async_op=not blocking))

    def recv_anysource(self, tensors, tag):
        blocking = getattr(_state, "blocking", False)
        return self._go(Call("recv", self, [], tensors, peer=-1, tag=tag, async_op=not blocking))


@torch.no_grad()
def _mirror(call: Call, rank: int, size: int) -> None:
    """Fill the outputs as if every rank held this rank's inputs (see module docstring)."""
    op, ins, outs = call.op, call.inputs, call.outputs
    kind = OPS[op]
    if not outs or kind.in_place:
        return  # in place: the input already is a plausible result
    if kind.flat and kind.size_factor > 0:
        for i, o in zip(ins, outs):
            if o.numel() == i.numel() * size:
                o.view(size, -1).copy_(i.reshape(1, -1).clone())  # FSDP's input is a slice of o
    elif kind.flat and kind.size_factor < 0:
        for i, o in zip(ins, outs):
            if i.numel() == o.numel() * size:
                o.view(-1).copy_(i.reshape(size, -1)[rank].clone())
    elif kind.each_output == "input":  # list gathers: each output a copy of the input
        src = ins[0] if ins else None
        for o in outs:
            if src is not None and o.shape == src.shape:
                o.copy_(src)
    elif kind.each_output == "chunk":
        for k, o in enumerate(outs):
            src = ins[rank] if op != "all_to_all" and len(ins) == size else (ins[k] if k < len(ins) else None)
            if src is not None and src.shape == o.shape:
                o.copy_(src)
            else:
                o.zero_()
    elif op == "all_to_all_single":
        if ins[0].shape == outs[0].shape:
            outs[0].copy_(ins[0])
        else:
            outs[0].zero_()
    elif op == "recv":
        for o in outs:
            o.zero_()


def blocking_p2p(fn):
    """Wrap c10d send/recv so the process group knows the caller blocks on it."""

    def wrapper(*args, **kwargs):
        prev = getattr(_state, "blocking", False)
        _state.blocking = True
        try:
            return fn(*args, **kwargs)
        finally:
            _state.blocking = prev

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]  # as functools.wraps sets it (name only: no doc)
    wrapper.__name__ = fn.__name__
    return wrapper


def _create(opts, backend_options=None):
    if RecordingProcessGroup.serve is not None:
        return RecordingProcessGroup.serve(opts, backend_options)
    return RecordingProcessGroup(opts.group_rank, opts.group_size, str(opts.group_id))


def register_backend() -> None:
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])
