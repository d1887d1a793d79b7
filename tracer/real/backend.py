"""Real mode's process group: every call written down as in the other modes, then issued on a
real gloo backend of this CPU, so the program gets the values a torchrun job on gloo gets.

It is the recording process group (capture/process_group.py: the same argument layouts, the
same Call per op, the same checks) with `_issue` sending the op on a ProcessGroupGloo built
from the group's own store (each group's PrefixStore of the one store every rank process
shares, tracer/real/install.py). The Work it returns is gloo's, wrapped so that the wait of an
async op is recorded where the program waits (RealWork).

gloo has no *_into_tensor_coalesced / reduce_scatter_tensor_coalesced binding: those are issued
as one gloo op per tensor pair (what torch's own gloo fallback does), recorded as the one
coalesced op the program asked for.
"""

from __future__ import annotations

import datetime
import inspect
import os

import torch
import torch.distributed as dist

from tracer.capture import watchdog
from tracer.capture.process_group import RecordingProcessGroup
from tracer.capture.recorder import Call, Recorder
from tracer.capture.work import wait_when_backward_ends

GLOO_CALL = {
    "allreduce": "allreduce",
    "allreduce_coalesced": "allreduce_coalesced",
    "allgather": "allgather",
    "allgather_coalesced": "allgather_coalesced",
    "all_gather_single": "_allgather_base",
    "_allgather_base": "_allgather_base",
    "all_gather_single_coalesced": "_allgather_base",
    "allgather_into_tensor_coalesced": "_allgather_base",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_single": "_reduce_scatter_base",
    "_reduce_scatter_base": "_reduce_scatter_base",
    "reduce_scatter_single_coalesced": "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced": "_reduce_scatter_base",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "alltoall": "alltoall",
    "all_to_all_single": "alltoall_base",
    "alltoall_base": "alltoall_base",
    "barrier": "barrier",
    "send": "send",
    "recv": "recv",
    "recv_anysource": "recv_anysource",
}
"""Recording process group method (the trampoline's names) -> the ProcessGroupGloo method that
carries it out, with the same arguments. gloo has no binding for the *_tensor_coalesced ops:
those go PAIRWISE, one call of the plain op per (output, input) pair, recorded as the one
coalesced op the program asked for."""

PAIRWISE = frozenset(
    {
        "all_gather_single_coalesced",
        "allgather_into_tensor_coalesced",
        "reduce_scatter_single_coalesced",
        "reduce_scatter_tensor_coalesced",
    }
)


def gloo_options(timeout: datetime.timedelta) -> dist.ProcessGroupGloo._Options:
    """gloo on the loopback device: a rank process of this machine reaches every other one there,
    whatever the host name resolves to (in a container it often resolves to nothing reachable)."""
    opts = dist.ProcessGroupGloo._Options()
    iface = os.environ.get("GLOO_SOCKET_IFNAME")
    device = (
        dist.ProcessGroupGloo.create_device(interface=iface)
        if iface
        else dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")
    )
    opts._devices = [device]
    opts._timeout = timeout
    return opts


class RealProcessGroup(RecordingProcessGroup):
    """One process group of this rank process, recorded, its ops carried out by gloo."""

    def __init__(self, rank: int, size: int, name: str, gloo: dist.ProcessGroupGloo):
        super().__init__(rank, size, name)
        self._gloo = gloo
        self._serving: tuple[str, tuple] | None = None  # the method being served, its arguments

    def _go(self, call: Call):
        rec = RecordingProcessGroup.recorder
        indices = rec.record(call) if rec is not None else {}
        work = self._issue(call)
        if rec is None:
            return work
        return RealWork(work, rec, indices if call.async_op else {}, _waiting(rec, call))

    def _issue(self, call: Call) -> dist.Work:
        assert self._serving is not None  # set by the method that called _go
        served, args = self._serving
        method = getattr(self._gloo, GLOO_CALL[served])
        if served in PAIRWISE:
            outputs, inputs, opts = args
            return _All([method(o, i, opts) for o, i in zip(outputs, inputs)])
        if served == "barrier" and args[0] is None:
            args = (dist.BarrierOptions(),)
        return method(*args)


def _serving(name: str):
    """RealProcessGroup.<name>: keep the method and its arguments (positional, as gloo takes them)
    for _issue, then the recording method, which checks them, builds the Call and calls _go."""
    recording = getattr(RecordingProcessGroup, name)
    signature = inspect.signature(recording)

    def method(self, *args, **kwargs):
        outer = self._serving is None  # an alias (_allgather_base) passes the same arguments on
        if outer:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            self._serving = (name, tuple(bound.args[1:]))
        try:
            return recording(self, *args, **kwargs)
        finally:
            if outer:
                self._serving = None

    method.__name__ = name
    return method


for _name in GLOO_CALL:
    setattr(RealProcessGroup, _name, _serving(_name))


def _waiting(rec: Recorder, call: Call) -> tuple[str, str, tuple[int, ...]]:
    """(op, group, the ranks it waits for) as the watchdog names a wait on this call."""
    try:
        g = rec.group_ref(call.pg)
    except (RuntimeError, ValueError, AttributeError):
        return call.op, "its group", ()
    me = dist.get_rank()
    if call.peer is not None and call.op in ("send", "recv"):
        peers: tuple[int, ...] = (g.ranks[call.peer],)
    else:
        peers = tuple(r for r in g.ranks if r != me)
    return call.op, watchdog.describe_group(g.name, g.ranks), peers


class RealWork(dist.Work):
    """gloo's Work, its wait recorded (once) for an async op, as RecordingWork records it; a
    wait that blocks says so (capture/watchdog.py)."""

    def __init__(
        self, work: dist.Work, recorder: Recorder, indices: dict[int, int], waiting: tuple = ("a collective", "", ())
    ):
        super().__init__()
        self._work = work
        self._recorder = recorder
        self._indices = indices
        self._waiting = waiting

    def wait(self, timeout=None) -> bool:
        with watchdog.blocking(*self._waiting):
            done = self._work.wait() if timeout is None else self._work.wait(timeout)
        if self._indices:
            self._recorder.waited(self._indices)
            self._indices = {}
        return done

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def is_success(self) -> bool:
        return self._work.is_success()

    def exception(self):
        return self._work.exception()

    def result(self) -> list:
        return self._work.result()

    def get_future(self):
        # as RecordingWork: a future handed out in backward (DDP's buckets) is waited, at the
        # latest, when that pass ends, where DDP's C++ finalize_backward waits out of our sight
        if self._indices and torch._C._current_graph_task_id() != -1:
            wait_when_backward_ends(self)
        return self._work.get_future()

    def source_rank(self) -> int:
        return self._work.source_rank()

    def synchronize(self) -> None:
        self._work.synchronize()


class _All(dist.Work):
    """Several gloo Works as one (a coalesced op issued pair by pair)."""

    def __init__(self, works: list[dist.Work]):
        super().__init__()
        self._works = works

    def wait(self, timeout=None) -> bool:
        return all(w.wait() for w in self._works)

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self._works)

    def is_success(self) -> bool:
        return all(w.is_success() for w in self._works)

    def exception(self):
        return next((w.exception() for w in self._works if w.exception() is not None), None)

    def result(self) -> list:
        return [t for w in self._works for t in w.result()]

    def get_future(self):
        futures = [w.get_future() for w in self._works]
        return torch.futures.collect_all(futures).then(lambda f: [t for x in f.value() for t in x.value()])


def create(opts, backend_options=None) -> RealProcessGroup:
    """The c10d backend creator (extended API): gloo on this group's own prefix store."""
    members = tuple(getattr(opts, "global_ranks_in_group", None) or range(opts.group_size))
    me = members[opts.group_rank] if opts.group_rank < len(members) else -1
    with watchdog.blocking(  # gloo connects to every peer of the group before it returns
        "connecting gloo", watchdog.describe_group(str(opts.group_id), members), [r for r in members if r != me]
    ):
        gloo = dist.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, gloo_options(opts.timeout))
    return RealProcessGroup(opts.group_rank, opts.group_size, str(opts.group_id), gloo)
