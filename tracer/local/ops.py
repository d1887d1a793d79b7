"""Capture under LocalTensorMode: one process runs all N ranks in lockstep.

LocalTensorMode answers c10d and functional-collective ops itself in `__torch_dispatch__`
(they never reach a backend), so that is where we listen: a wrapper that looks at the op's
namespace and, for collectives, describes the call once; the recorder then writes it on every
member of every sibling group with that rank's own shapes (uneven shards, a2a splits).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensor, LocalTensorMode, _check_for_subclass, _map_to_rank_local_val
from torch.distributed._local_tensor import _c10d as local_c10d
from torch.utils import _pytree as pytree

from tracer.capture import arg_checks
from tracer.capture.dispatched import C10D, FUNCTIONAL, NAMESPACES, P2P, arguments, describe, flat, resolve_group
from tracer.capture.patches import Patcher
from tracer.capture.recorder import GroupRef, Recorder, RecordError
from tracer.capture.work import RecordingWork
from tracer.local import rank_branch
from tracer.local.rank_values import user_site
from tracer.modes import OTHER_MODES


def _view(x, rank: int):
    return _map_to_rank_local_val(x, rank) if isinstance(x, (LocalTensor, torch.SymInt)) else x


def install(p: Patcher, rec: Recorder) -> None:
    """Record collectives that LocalTensorMode answers; refuse p2p (SPMD cannot simulate it)."""
    rec.view = _view
    rec.siblings = lambda pg, g: _siblings(rec, pg, g)
    orig = LocalTensorMode.__torch_dispatch__
    # Functional collectives are waited on through another LocalTensor over the same storage,
    # so pending waits are keyed by the storage of the output's first shard. A coalesced op's
    # outputs share one entry: its wait is recorded once, at the first (as a Work's is).
    waits: dict[int, list[dict[int, int]]] = {}
    live: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if rank_branch.ACTIVE and not rec.busy:
            out = _in_rank0_branch(orig, self, func, types, args, kwargs or {})
            if out is not _GO:
                return out
        if func.namespace not in NAMESPACES or rec.busy:
            return orig(self, func, types, args, kwargs)
        name = func._schema.name
        kwargs = kwargs or {}
        if name in P2P:
            raise RecordError(
                "p2p send/recv cannot be simulated in local mode (LocalTensor runs all ranks "
                f"in lockstep); record this program with {OTHER_MODES}"
            )
        if _check_for_subclass(pytree.tree_leaves((args, kwargs))):
            # a tensor subclass LocalTensorMode does not know (an un-waited AsyncCollectiveTensor
            # fed to the next functional collective): the mode answers NotImplemented, so torch
            # asks the subclass, which waits and dispatches the op again on plain LocalTensors.
            # That dispatch is the op; this one is neither run nor recorded
            return orig(self, func, types, args, kwargs)
        if name == "_c10d_functional::wait_tensor":
            pending = waits.pop(_storage_key(args[0]), None)
            if pending:
                rec.waited(pending.pop())
            return orig(self, func, types, args, kwargs)
        if name not in C10D and name not in FUNCTIONAL:
            return orig(self, func, types, args, kwargs)
        a = arguments(func, args, kwargs)
        _check(name, a)  # what NCCL / Gloo would reject raises here, before anything runs
        rec.busy = True
        try:
            if name in _MISSING:  # collectives LocalTensorMode (torch 2.13) does not implement
                result = _MISSING[name](a)
            else:
                result = orig(self, func, types, args, kwargs)
        finally:
            rec.busy = False
        call = describe(name, a, result)
        indices = rec.record(call)
        if name in C10D:
            pair = isinstance(result, tuple) and len(result) == 2
            if call.async_op and (pair or isinstance(result, torch._C.ScriptObject)):
                # LocalTensorMode's FakeWork has a value-less future (DDP's reducer reads the
                # reduced bucket from it). The Python half of a boxed Work dies with its last
                # Python reference, and a wait on it then hangs: keep it alive until waited on
                outs = flat(result[0]) if pair else (call.outputs or call.inputs)
                work = dist.Work.boxed(RecordingWork(rec, indices, True, keep=live, outputs=outs))
                return (result[0], work) if pair else work
            return result
        pending = [indices]
        for t in flat(result):
            waits[_storage_key(t)] = pending
        return result

    p.set(LocalTensorMode, "__torch_dispatch__", __torch_dispatch__)


_GO = object()


def _in_rank0_branch(orig, mode, func, types, args, kwargs):
    """An op dispatched inside a rank-0 branch (local/rank_branch.py): rank 0 alone runs it, so
    a collective, a write to a tensor made before the branch or a random draw is refused; a
    tensor read (`loss.item()` for a log line) is rank 0's value."""
    branch = rank_branch.ACTIVE[-1]
    name = func._schema.name
    if name in C10D or name in FUNCTIONAL or name in P2P:
        raise branch.refuse(f"issues {C10D.get(name) or FUNCTIONAL.get(name) or name}", user_site(1))
    if func.namespace in NAMESPACES:
        return _GO
    if func is torch.ops.aten._local_scalar_dense.default and isinstance(args[0], LocalTensor):
        local = args[0]._local_tensors
        return local[min(local)].item()
    if torch.Tag.nondeterministic_seeded in func.tags:
        raise branch.refuse(f"draws random numbers ({func})", user_site(1))
    if func._schema.is_mutable:
        for arg, value in zip(
            func._schema.arguments, [*args, *[kwargs.get(a.name) for a in func._schema.arguments[len(args) :]]]
        ):
            written = arg.alias_info is not None and arg.alias_info.is_write
            if written and isinstance(value, torch.Tensor) and value not in branch.fresh:
                raise branch.refuse(f"writes a tensor ({func})", user_site(1))
    out = orig(mode, func, types, args, kwargs)
    for t in flat(out):
        if isinstance(t, torch.Tensor):
            branch.fresh.add(t)
    return out


def _local_groups(pg) -> list[list[int]]:
    ranks, offsets, _ = local_c10d._prepare_collective_groups(pg)
    return [[o + r for r in ranks] for o in offsets]


def _one(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _backend_args(name: str, a: dict) -> tuple[str, list, list, dict]:
    """(op, inputs, outputs, keywords) of an op as a ProcessGroup method receives them, for
    arg_checks."""
    if name in C10D:
        op = C10D[name]
        ins = next((a[k] for k in ("input_tensors", "input_tensor", "inputs", "input_list", "input") if k in a), None)
        outs = next(
            (a[k] for k in ("output_tensors", "output_tensor", "outputs", "output_lists", "output") if k in a), None
        )
        if ins is None:  # in place: the tensors are both
            ins = outs = a.get("tensors", [])
        kw: dict = {"root": int(a["root_rank"])} if "root_rank" in a else {}
        if op == "all_to_all_single":
            kw["splits"] = (list(a["input_split_sizes"]), list(a["output_split_sizes"]))
        return op, _one(ins), _one(outs), kw
    op = FUNCTIONAL[name]
    ins = _one(a.get("input", a.get("inputs", [])))
    kw = {"root": int(a["src"])} if "src" in a else {}
    if "input_split_sizes" in a and name != "_dtensor::shard_dim_alltoall":
        kw["splits"] = (list(a["input_split_sizes"] or []), list(a["output_split_sizes"] or []))
    if "out" in a:
        return op, ins, _one(a["out"]), kw
    # the op makes its output to fit: only an all_to_all_single's input side can be wrong (not
    # DTensor's shard_dim_alltoall: it cuts along its shard dim, dim 0 need not divide)
    return op, ins if name == "_c10d_functional::all_to_all_single" else [], [], kw


def _check(name: str, a: dict) -> None:
    """arg_checks on every simulated rank, each with its own tensors and group rank, before the
    op runs; raises the first rank's error (torch's exception type), naming the ranks it failed
    on in `failed_ranks` (run.py closes those with the error, the others as stopped)."""
    if name == "c10d::barrier" or (name not in C10D and name not in FUNCTIONAL):
        return
    op, ins, outs, kw = _backend_args(name, a)
    if op in ("gather", "scatter") and not any(outs if op == "gather" else ins):
        lst = "gather list" if op == "gather" else "scatter list"
        raise RecordError(
            f"local mode cannot record this {op}: its root ({'dst' if op == 'gather' else 'src'} "
            f"{kw.get('root')} of its group) holds the {lst}, and local mode runs rank 0's Python (a "
            f"non-root here) for every rank; root it at rank 0, or record this program with {OTHER_MODES}"
        )
    pg = resolve_group(a.get("process_group", a.get("group_name", a.get("group"))))
    first: Exception | None = None
    failed = []
    for group in _local_groups(pg):
        for i, r in enumerate(group):
            mine = dict(kw, splits=arg_checks.local_view(kw["splits"], r, _view)) if "splits" in kw else kw
            try:
                ins_r, outs_r = arg_checks.local_view(ins, r, _view), arg_checks.local_view(outs, r, _view)
                arg_checks.check(op, len(group), i, ins_r, outs_r, **mine)
            except (RuntimeError, ValueError, TypeError) as e:
                first = first or e
                failed.append(r)
    if first is not None:
        first.failed_ranks = sorted(failed)  # type: ignore[attr-defined]
        raise first


@torch.no_grad()
def _all_gather_coalesced(a: dict):
    """c10d.allgather_coalesced_: output list k of every member holds member k's inputs."""
    outs, ins = a["output_lists"], a["input_list"]
    for group in _local_groups(resolve_group(a["process_group"])):
        for k, m in enumerate(group):
            for i, t in enumerate(ins):
                for r in group:
                    _shard(outs[k][i], r).copy_(_shard(t, m))
    return dist.Work.boxed(local_c10d.FakeWork())


def _shard(t, rank: int):
    return t._local_tensors[rank] if isinstance(t, LocalTensor) else t


@torch.no_grad()
def _reduce_scatter_list(a: dict):
    """c10d.reduce_scatter_: rank i of each group gets the reduction of every member's i-th input."""
    outs, ins = a["output_tensors"], a["input_tensors"]
    op = a["reduce_op"].op()
    for group in _local_groups(resolve_group(a["process_group"])):
        for i, r in enumerate(group):
            parts = [ins[0][i]._local_tensors[m] for m in group]
            outs[0]._local_tensors[r].copy_(local_c10d._local_reduce(op, parts))
    return outs, dist.Work.boxed(local_c10d.FakeWork())


@torch.no_grad()
def _reduce(a: dict):
    """c10d.reduce_: the root of each group gets the reduction; the others keep their input."""
    tensors = a["tensors"]
    op, root = a["reduce_op"].op(), int(a["root_rank"])
    for group in _local_groups(resolve_group(a["process_group"])):
        reduced = local_c10d._local_reduce(op, [tensors[0]._local_tensors[m] for m in group])
        tensors[0]._local_tensors[group[root]].copy_(reduced)
    return dist.Work.boxed(local_c10d.FakeWork())


@torch.no_grad()
def _gather(a: dict):
    """c10d.gather_: the root of each group gets every member's input (LocalTensor refuses it as
    MPMD; in a lockstep simulation every rank can still hold the gather list)."""
    outs, ins = a["output_tensors"], a["input_tensors"]
    root = int(a["root_rank"])
    if outs and outs[0]:
        for group in _local_groups(resolve_group(a["process_group"])):
            for i, m in enumerate(group):
                outs[0][i]._local_tensors[group[root]].copy_(ins[0]._local_tensors[m])
    return dist.Work.boxed(local_c10d.FakeWork())


_MISSING = {
    "c10d::allgather_coalesced_": _all_gather_coalesced,
    "c10d::reduce_scatter_": _reduce_scatter_list,
    "c10d::reduce_": _reduce,
    "c10d::gather_": _gather,
}


def _storage_key(t) -> int:
    if isinstance(t, LocalTensor) and t._local_tensors:
        t = next(iter(t._local_tensors.values()))
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, AttributeError):
        return id(t)


def _siblings(rec: Recorder, pg, g: GroupRef) -> list[GroupRef]:
    """The group as every simulated rank sees it: rank 0's group shifted over the world."""
    ranks, offsets, offset = local_c10d._prepare_collective_groups(pg)
    names = rec.created.get((g.desc, g.ranks), [])
    k = names.index(g.name) if g.name in names else 0
    out = []
    for o in offsets:
        members = tuple(o + r for r in ranks)
        if members == g.ranks:
            out.append(g)
            continue
        same = rec.created.get((g.desc, members), [])
        out.append(GroupRef(same[k] if k < len(same) else f"{g.name}@{members[0]}", members, g.desc))
    return out
