"""The op vocabulary: every op a trace's `op` column can hold, with what it means. The one table
that the recorder (capture, replay), the format, the checks, normalize, the wait-for semantics
and the Flight Recorder conventions read; add an op here and every reader knows it.

Torch-free. Ops are c10d's names (`all_gather_into_tensor`, not `_allgather_base`), one per
op torch dispatches (`dispatched`: the c10d and functional dispatcher ops of torch 2.13 that an
op stands for). A coalesced op is what torch issued, even for one tensor: inside
`_coalescing_manager` c10d dispatches `allgather_into_tensor_coalesced_` for a single
all_gather_into_tensor, and the trace says `all_gather_into_tensor_coalesced`.
"""

from __future__ import annotations

from dataclasses import dataclass

COLLECTIVE = "collective"
P2P = "p2p"
GROUP = "group"
WAIT = "wait"
MARKER = "marker"


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """What one op is; attributes are False / "" / 0 unless the op says otherwise."""

    name: str
    """The op column's value (c10d's name)."""
    kind: str
    """COLLECTIVE, P2P (send / recv), GROUP (process group creation), WAIT (on an async op),
    MARKER (a DeviceMesh or DTensor redistribution: context, not communication)."""
    rooted: bool = False
    """The `peer` column holds the root rank (broadcast, reduce, gather, scatter)."""
    size_factor: int = 0
    """+1: every member's total output is its input times the group size (all-gathers);
    -1: its input is its output times the group size (reduce-scatters); 0: neither."""
    agree: str = ""
    """The shapes every member of the group must pass alike: "in", "out", or "" (all_to_all's
    splits differ per member; a barrier has none). The list forms agree on their per-member
    side: all_gather's outputs (chunks may differ by rank: all_gather_v), reduce_scatter's inputs."""
    in_place: bool = False
    """The outputs are the inputs (all_reduce, broadcast, reduce)."""
    coalesced: bool = False
    """Several tensors in one op."""
    flat: bool = False
    """Tensor form: one output tensor per input, sized by the group (`*_into_tensor`,
    `reduce_scatter_tensor*`); otherwise a list op has one tensor per member."""
    each_output: str = ""
    """List forms: what each output tensor holds. "input": a member's input (all_gather, gather:
    one output per member); "chunk": the input chunk addressed to this rank (reduce_scatter,
    scatter, all_to_all). What a fake backend, which exchanges nothing, writes in its place."""
    uneven: bool = False
    """Each member contributes its own size (NCCL's `all_gather_v` / `reduce_scatter_v`, as Flight
    Recorder names them): the shared side is the sum of the members' own sides, not the own side
    times the group size."""
    reduces: bool = False
    """Combines the members' data with the `reduce_op` (all-reduces, reduce, reduce-scatters)."""
    splits: bool = False
    """Each member sends every member a slice of its input sized by split lists, recorded in the
    `splits` column (all_to_all_single)."""
    dispatched: tuple[str, ...] = ()
    """The dispatcher ops (`c10d::...`, `_c10d_functional::...`, `_dtensor::...`) torch 2.13
    issues for it; empty for ops torch does not dispatch (Flight Recorder's `_v` forms, group
    creation, markers). tests/format/test_dispatched_ops.py holds them against torch's registry."""


def _collective(name: str, **kw) -> Op:
    return Op(name=name, kind=COLLECTIVE, coalesced=name.endswith("_coalesced"), **kw)


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        _collective(
            "all_reduce",
            agree="in",
            in_place=True,
            reduces=True,
            dispatched=("c10d::allreduce_", "_c10d_functional::all_reduce", "_c10d_functional::all_reduce_"),
        ),
        _collective(
            "all_reduce_coalesced",
            agree="in",
            in_place=True,
            reduces=True,
            dispatched=(
                "c10d::allreduce_coalesced_",
                "_c10d_functional::all_reduce_coalesced",
                "_c10d_functional::all_reduce_coalesced_",
            ),
        ),
        _collective("all_gather", agree="out", size_factor=1, each_output="input", dispatched=("c10d::allgather_",)),
        _collective(
            "all_gather_coalesced",
            agree="in",
            size_factor=1,
            each_output="input",
            dispatched=("c10d::allgather_coalesced_",),
        ),
        _collective(
            "all_gather_into_tensor",
            agree="in",
            size_factor=1,
            flat=True,
            dispatched=(
                "c10d::_allgather_base_",
                "_c10d_functional::all_gather_into_tensor",
                "_c10d_functional::all_gather_into_tensor_out",
            ),
        ),
        _collective(
            "all_gather_into_tensor_coalesced",
            agree="in",
            size_factor=1,
            flat=True,
            dispatched=(
                "c10d::allgather_into_tensor_coalesced_",
                "_c10d_functional::all_gather_into_tensor_coalesced",
            ),
        ),
        _collective("all_gather_v", agree="out", size_factor=1, each_output="input", uneven=True),
        _collective(
            "reduce_scatter",
            agree="in",
            size_factor=-1,
            each_output="chunk",
            reduces=True,
            dispatched=("c10d::reduce_scatter_",),
        ),
        _collective("reduce_scatter_v", agree="in", size_factor=-1, each_output="chunk", uneven=True, reduces=True),
        _collective(
            "reduce_scatter_tensor",
            agree="out",
            size_factor=-1,
            flat=True,
            reduces=True,
            dispatched=(
                "c10d::_reduce_scatter_base_",
                "_c10d_functional::reduce_scatter_tensor",
                "_c10d_functional::reduce_scatter_tensor_out",
            ),
        ),
        _collective(
            "reduce_scatter_tensor_coalesced",
            agree="out",
            size_factor=-1,
            flat=True,
            reduces=True,
            dispatched=(
                "c10d::reduce_scatter_tensor_coalesced_",
                "_c10d_functional::reduce_scatter_tensor_coalesced",
            ),
        ),
        _collective(
            "broadcast",
            agree="in",
            rooted=True,
            in_place=True,
            dispatched=("c10d::broadcast_", "_c10d_functional::broadcast", "_c10d_functional::broadcast_"),
        ),
        _collective("reduce", agree="in", rooted=True, in_place=True, reduces=True, dispatched=("c10d::reduce_",)),
        _collective("gather", agree="in", rooted=True, each_output="input", dispatched=("c10d::gather_",)),
        _collective("scatter", agree="out", rooted=True, each_output="chunk", dispatched=("c10d::scatter_",)),
        _collective("all_to_all", each_output="chunk", dispatched=("c10d::alltoall_",)),
        _collective(
            "all_to_all_single",
            splits=True,
            dispatched=(
                "c10d::alltoall_base_",
                "_c10d_functional::all_to_all_single",
                "_dtensor::shard_dim_alltoall",
            ),
        ),
        _collective("barrier", dispatched=("c10d::barrier",)),
        Op(name="send", kind=P2P, dispatched=("c10d::send", "_c10d_functional::isend")),
        Op(name="recv", kind=P2P, dispatched=("c10d::recv_", "c10d::recv_any_source_", "_c10d_functional::irecv")),
        Op(name="init_process_group", kind=GROUP),
        Op(name="new_group", kind=GROUP),
        Op(name="split_group", kind=GROUP),
        Op(name="wait", kind=WAIT, dispatched=("_c10d_functional::wait_tensor",)),
        Op(name="mesh", kind=MARKER),
        Op(name="redistribute", kind=MARKER),
    )
}
DISPATCHED: dict[str, str] = {d: op.name for op in OPS.values() for d in op.dispatched}
"""Dispatcher op (`c10d::allgather_into_tensor_coalesced_`) -> the op recorded for it."""


def names(**where) -> tuple[str, ...]:
    """Op names whose attributes equal `where`, sorted: `names(kind=COLLECTIVE, rooted=True)`."""
    return tuple(sorted(n for n, op in OPS.items() if all(getattr(op, k) == v for k, v in where.items())))


COLLECTIVE_OPS = frozenset(names(kind=COLLECTIVE))
P2P_OPS = frozenset(names(kind=P2P))
GROUP_OPS = frozenset(names(kind=GROUP))
COMM_OPS = COLLECTIVE_OPS | P2P_OPS
"""Ops that move data between ranks."""
ROOTED_OPS = frozenset(names(rooted=True))
IN_PLACE_OPS = frozenset(names(in_place=True))
GATHER_OPS = frozenset(names(size_factor=1))
SCATTER_OPS = frozenset(names(size_factor=-1))
UNEVEN_OPS = frozenset(names(uneven=True))
"""Gathers / reduce-scatters whose members contribute sizes of their own (the `_v` variants)."""
WAIT_OPS = frozenset(names(kind=WAIT))
SPLIT_OPS = frozenset(names(splits=True))
REDUCING_OPS = frozenset(names(reduces=True))
