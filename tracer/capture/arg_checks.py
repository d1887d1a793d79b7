"""What a real backend rejects: each collective's arguments checked as ProcessGroupNCCL / Gloo
and torch's own split check do, so a program that raises on a cluster raises in the dry run, at
its own line, with torch's words.

A fake backend exchanges nothing, so without this an all_to_all_single whose splits cannot cut
its input records silently. The rules and messages are torch's (torch/csrc/distributed/c10d):
where NCCL checks explicitly its exception type is kept (`_allgather_base` / `_reduce_scatter_base`
raise TypeError / ValueError, gather and scatter ValueError), elsewhere Gloo's or Utils.hpp's
TORCH_CHECK, a RuntimeError. Torch's message comes first (what a user searches for), what this
call passed after it in parentheses.

Arguments come as the backend receives them (a ProcessGroup method's layout, one rank's tensors):
`check(op, size, rank, ins, outs, ...)` with `size` / `rank` the group's. Checks only what one
rank can see; agreement between ranks is the analyzer's (checks/collectives.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def check(
    op: str,
    size: int,
    rank: int,
    ins: Sequence = (),
    outs: Sequence = (),
    *,
    root: int | None = None,
    peer: int | None = None,
    splits: tuple | None = None,
) -> None:
    """Raise what the backend raises for these arguments (nothing when they are valid)."""
    rule = _RULES.get(op)
    if root is not None and op in ("broadcast", "reduce", "gather", "scatter"):
        _root(op, root, size)
    if peer is not None and peer >= 0 and op in ("send", "recv"):
        _peer(op, peer, size)
    if rule is not None:
        rule(op, size, rank, list(ins), list(outs), root, splits)


def _shape(t) -> str:
    return "(" + ", ".join(str(int(d)) for d in t.shape) + ("," if t.dim() == 1 else "") + ")"


def _dtype(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def _root(op: str, root: int, size: int) -> None:
    if not 0 <= root < size:
        kind = ValueError if op in ("gather", "scatter") else RuntimeError  # NCCL's / Gloo's
        raise kind(f"{op}: invalid root rank: {root} (the group has {size} ranks)")


def _peer(op: str, peer: int, size: int) -> None:
    if not 0 <= peer < size:
        which = "destination" if op == "send" else "source"
        raise ValueError(f"Invalid {which} rank: {peer} is not a rank of the group ({op} in a group of {size} ranks)")


def _same_device(op: str, tensors: list, message: str = "tensors should be on the same device") -> None:
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise RuntimeError(f"{op}: {message} (got {', '.join(sorted(map(str, devices)))})")


def _each_like(op: str, like, tensors: list, what: str = "") -> None:
    """Gloo's assertTypeAndSizesMatch: every tensor of `tensors` has `like`'s dtype and shape."""
    for i, t in enumerate(tensors):
        if t.dtype != like.dtype:
            raise RuntimeError(
                f"{op}: invalid tensor type at index {i} (expected {_dtype(like)}, got {_dtype(t)}){what}"
            )
        if t.shape != like.shape:
            raise RuntimeError(
                f"{op}: invalid tensor size at index {i} (expected {_shape(like)}, got {_shape(t)}){what}"
            )


def _pairs(op: str, ins: list, outs: list) -> None:
    if len(ins) != len(outs):
        raise RuntimeError(
            f"{op}: requires input/output tensor lists to have the same length ({len(ins)} inputs, {len(outs)} outputs)"
        )


# ---- per op ------------------------------------------------------------------------------------
def _all_reduce_coalesced(op, size, rank, ins, outs, root, splits) -> None:
    if len({t.dtype for t in ins}) > 1:
        raise RuntimeError(f"{op}: tensors must all have the same type")
    _same_device(op, ins, "tensors must all be on the same device")


def _gather_into_tensor(op, size, rank, ins, outs, root, splits) -> None:
    """NCCL's _allgather_base (and each pair of its coalesced form)."""
    _pairs(op, ins, outs)
    for i, o in zip(ins, outs):
        if i.dtype != o.dtype:
            raise TypeError(
                f"output tensor must have the same type as input tensor ({op}: {_dtype(o)} output, {_dtype(i)} input)"
            )
        if i.numel() * size != o.numel():
            raise ValueError(
                f"output tensor size must be equal to world_size times input tensor size ({op}: output "
                f"{_shape(o)} has {o.numel()} elements, input {_shape(i)} x {size} ranks = {i.numel() * size})"
            )
        _same_device(op, [i, o])


def _scatter_from_tensor(op, size, rank, ins, outs, root, splits) -> None:
    """NCCL's _reduce_scatter_base (and each pair of its coalesced form)."""
    _pairs(op, ins, outs)
    for i, o in zip(ins, outs):
        if i.dtype != o.dtype:
            raise TypeError(
                f"input tensor must be the same type as the output tensor. ({op}: {_dtype(i)} input, "
                f"{_dtype(o)} output)"
            )
        if i.numel() != o.numel() * size:
            raise ValueError(
                f"input tensor must be the same size as output size times world size ({op}: input "
                f"{_shape(i)} has {i.numel()} elements, output {_shape(o)} x {size} ranks = {o.numel() * size})"
            )
        _same_device(op, [i, o])


def _one_per_member(op, size, rank, mine, per_member: list, side: str, index: int) -> None:
    """A list collective's list (all_gather's outputs, reduce_scatter's inputs): one tensor per
    member, all like `mine` (Gloo), or of sizes of their own (NCCL's all_gather_v /
    reduce_scatter_v), where this rank's own slot still has `mine`'s size."""
    if len(per_member) != size:  # Gloo's allgather words; reduce_scatter: torch's fake backend's
        raise RuntimeError(
            f"{op}: invalid output tensor list at index {index} (expected length {size}, got {len(per_member)})"
            if side == "output"
            else f"{op}: invalid input tensor list size, must be world size (expected length {size}, "
            f"got {len(per_member)})"
        )
    if len({tuple(t.shape) for t in per_member}) == 1:
        _each_like(op, mine, per_member, f" in the {side} list")
    else:
        if per_member[rank].numel() != mine.numel():
            raise RuntimeError(
                f"{op}: {side} tensor {rank} (this rank's own) has {per_member[rank].numel()} elements, "
                f"the {'input' if side == 'output' else 'output'} {mine.numel()}"
            )
        for i, t in enumerate(per_member):  # all_gather_v / reduce_scatter_v: sizes of their own, one dtype
            if t.dtype != mine.dtype:
                expected = f"(expected {_dtype(mine)}, got {_dtype(t)})"
                raise RuntimeError(f"{op}: invalid tensor type at index {i} {expected} in the {side} list")
    _same_device(op, [mine, *per_member])


def _all_gather(op, size, rank, ins, outs, root, splits) -> None:
    if not ins:
        raise RuntimeError(f"{op}: requires non-empty input tensor list")
    _pairs(op, ins, outs)
    for k, (i, lst) in enumerate(zip(ins, outs)):
        _one_per_member(op, size, rank, i, list(lst), "output", k)


def _reduce_scatter(op, size, rank, ins, outs, root, splits) -> None:
    _pairs(op, ins, outs)
    for k, (lst, o) in enumerate(zip(ins, outs)):
        _one_per_member(op, size, rank, o, list(lst), "input", k)


def _all_gather_coalesced(op, size, rank, ins, outs, root, splits) -> None:
    """Gloo's allgather_coalesced: one output list per member, each like the input list."""
    if not ins:
        raise RuntimeError(f"{op}: requires non-empty input tensor list")
    if len(outs) != size:
        raise RuntimeError(f"{op}: output lists should be equal to world size (expected {size}, got {len(outs)})")
    _same_device(op, ins)
    for lst in outs:
        if len(lst) != len(ins):
            raise RuntimeError(f"{op}: invalid output size: (expected length {len(ins)}, got {len(lst)})")
        for i, (t, o) in enumerate(zip(ins, lst)):
            if o.shape != t.shape:
                raise RuntimeError(
                    f"{op}: invalid size of output tensor at index {i} (expected length {_shape(t)}, got {_shape(o)})"
                )
            if o.dtype != t.dtype:
                raise RuntimeError(f"{op}: invalid tensor type at index {i} (expected {_dtype(t)}, got {_dtype(o)})")


def _rooted_list(op, size, rank, ins, outs, root, splits) -> None:
    """gather's outputs / scatter's inputs: [a list of one tensor per member] on the root (NCCL's
    and Gloo's checks, NCCL's ValueError); the other ranks' are Python's (distributed_c10d)."""
    single, lists, side = (ins, outs, "output") if op == "gather" else (outs, ins, "input")
    if len(single) != 1:
        raise ValueError(f"{op}: requires a single-element {'input' if op == 'gather' else 'output'} tensor list")
    if root is None or rank != root:
        return
    if len(lists) != 1:
        raise ValueError(f"{op}: requires a single-element {side} list containing a list with {size} tensors.")
    if len(lists[0]) != size:
        raise ValueError(
            f"{op}: Incorrect {side} list size {len(lists[0])}. {side.capitalize()} list size should be "
            f"{size}, same as size of the process group."
        )
    try:
        _each_like(op, single[0], list(lists[0]), f" in the {side} list")
    except RuntimeError as e:
        raise ValueError(str(e)) from None
    _same_device(op, [single[0], *lists[0]])


def _all_to_all(op, size, rank, ins, outs, root, splits) -> None:
    for side, lst in (("input", ins), ("output", outs)):
        if len(lst) != size:
            raise RuntimeError(f"{op}: {side} tensor list size {len(lst)} does not match world size {size}")
    _same_device(op, [*ins, *outs], "Tensors must be on the same device")


def _dim0(op: str, t, side: str) -> int:
    if t.dim() == 0:
        raise RuntimeError(f"Dimension specified as 0 but tensor has no dimensions ({op}: the {side} is a scalar)")
    return int(t.shape[0])


def _split_sizes(op: str, splits: Sequence, dim0: int, size: int, side: str) -> None:
    """torch's c10d::checkSplitSizes (Utils.hpp), on one side of an all_to_all_single."""
    if not splits:
        if dim0 % size:
            raise RuntimeError(
                f"Tensor's dim 0 does not divide equally across group size ({op}: the {side}'s dim 0 is "
                f"{dim0}, the group has {size} ranks)"
            )
        return
    if len(splits) != size:
        raise RuntimeError(
            f"Number of tensor splits not equal to group size ({op}: {side}_split_sizes has {len(splits)} "
            f"entries, the group {size} ranks)"
        )
    if sum(int(s) for s in splits) != dim0:
        listed = "[" + ", ".join(str(int(s)) for s in splits) + "]"
        raise RuntimeError(
            f"Split sizes doesn't match total dim 0 size ({op}: {side}_split_sizes {listed} sum to "
            f"{sum(int(s) for s in splits)}, the {side}'s dim 0 is {dim0})"
        )


def _all_to_all_single(op, size, rank, ins, outs, root, splits) -> None:
    in_splits, out_splits = splits if splits is not None else ((), ())
    if not ins:  # a functional op's (DTensor's shard_dim_alltoall) that only it can judge
        return
    _split_sizes(op, in_splits, _dim0(op, ins[0], "input"), size, "input")
    if outs:  # a functional collective allocates its output from the output splits: nothing to check
        _split_sizes(op, out_splits, _dim0(op, outs[0], "output"), size, "output")
        if ins[0].device.type != outs[0].device.type:
            raise RuntimeError(f"{op}: output tensor and input tensor must be on the same type of device")
    elif out_splits and len(out_splits) != size:
        _split_sizes(op, out_splits, sum(int(s) for s in out_splits), size, "output")


_RULES = {
    "all_reduce_coalesced": _all_reduce_coalesced,
    "all_gather": _all_gather,
    "all_gather_coalesced": _all_gather_coalesced,
    "all_gather_into_tensor": _gather_into_tensor,
    "all_gather_into_tensor_coalesced": _gather_into_tensor,
    "reduce_scatter": _reduce_scatter,
    "reduce_scatter_tensor": _scatter_from_tensor,
    "reduce_scatter_tensor_coalesced": _scatter_from_tensor,
    "gather": _rooted_list,
    "scatter": _rooted_list,
    "all_to_all": _all_to_all,
    "all_to_all_single": _all_to_all_single,
}


def local_view(x, rank: int, view):
    """A nested argument (tensors, lists of lists) as simulated rank `rank` holds it."""
    if isinstance(x, (list, tuple)):
        return [local_view(t, rank, view) for t in x]
    return view(x, rank) if isinstance(x, (torch.Tensor, torch.SymInt)) else x
