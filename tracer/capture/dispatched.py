"""A collective as torch's dispatcher sees it (local mode's LocalTensorMode and fake compute's
FakeTensorMode both meet collectives there, not in a backend): which dispatcher ops are
collectives (from the op table), and the recorder's Call for one from its schema's arguments."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from traceformat.ops import COLLECTIVE_OPS, DISPATCHED, OPS, P2P_OPS
from tracer.capture.process_group import reduce_name
from tracer.capture.recorder import Call

NAMESPACES = frozenset({"c10d", "_c10d_functional", "_dtensor"})  # where collectives are dispatched

# dispatcher op -> the op recorded for it, from the op table: c10d's ops (the arguments read
# before it runs) and the functional ones (read after, from the result)
C10D = {name: op for name, op in DISPATCHED.items() if name.startswith("c10d::") and op in COLLECTIVE_OPS}
FUNCTIONAL = {name: op for name, op in DISPATCHED.items() if not name.startswith("c10d::") and op in COLLECTIVE_OPS}
P2P = frozenset(name for name, op in DISPATCHED.items() if op in P2P_OPS)


def flat(x) -> list:
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in flat(item)]
    return [x]


def resolve_group(x):
    if isinstance(x, str):
        return dist.distributed_c10d._resolve_process_group(x)
    if isinstance(x, torch._C.ScriptObject):
        return dist.ProcessGroup.unbox(x)
    return x


def arguments(func, args, kwargs) -> dict[str, Any]:
    names = [a.name for a in func._schema.arguments]
    out = {a.name: a.default_value for a in func._schema.arguments if a.has_default_value()}
    out.update(zip(names, args))
    out.update(kwargs)
    return out


def describe(name: str, a: dict, result) -> Call:
    """Build the Call for a c10d op (before it runs) or a functional op (after, from its result)."""
    if name in C10D:
        op = C10D[name]
        call = Call(op, resolve_group(a["process_group"]), async_op=bool(a.get("async_op", False)))
        if OPS[op].in_place:
            call.inputs = call.outputs = list(a["tensors"])
        elif op == "barrier":
            pass
        else:
            ins = next(a[k] for k in ("input_tensors", "input_tensor", "inputs", "input_list", "input") if k in a)
            outs = next(
                a[k] for k in ("output_tensors", "output_tensor", "outputs", "output_lists", "output") if k in a
            )
            call.inputs, call.outputs = flat(ins), flat(outs)
        if "reduce_op" in a:
            call.reduce_op = reduce_name(a["reduce_op"])
        if "root_rank" in a:
            call.root = int(a["root_rank"])
        if op == "all_to_all_single":
            call.splits = (list(a["input_split_sizes"]), list(a["output_split_sizes"]))
        return call
    op = FUNCTIONAL[name]
    group = a.get("group_name", a.get("group"))
    call = Call(op, resolve_group(group), async_op=True)
    ins = a.get("input", a.get("inputs"))
    call.inputs = flat(ins)
    call.outputs = flat(a["out"]) if "out" in a else flat(result)
    if "reduce_op" in a:
        call.reduce_op = reduce_name(a["reduce_op"])
    if "src" in a:
        call.root = int(a["src"])
    if op == "all_to_all_single":
        if "input_split_sizes" in a:
            call.splits = (list(a["input_split_sizes"] or []), list(a["output_split_sizes"] or []))
        elif name == "_dtensor::shard_dim_alltoall" and call.inputs and call.pg is not None:
            # it sends each peer one shard_dim chunk, not a block of dim-0 rows: splits in elements
            n = call.pg.size()
            call.splits = ([call.inputs[0].numel() // n] * n, [call.outputs[0].numel() // n] * n)
    return call
