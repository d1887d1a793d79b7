"""Values read back: a small collective's result is the one a real run computes, in fake mode.

Frameworks check and decide on values that went through a collective: DeepSpeed ZeRO-3
broadcasts rank 0's list length and every rank compares it with its own
(`assert_lst_len_same_as_other_ranks`), Lightning sums a boolean decision and compares it with
the world size, torchtune all-reduces the token count and scales the gradients by it,
Accelerate gathers sizes and pads to their max, a loss scaler all-reduces an overflow flag.
Mirrored data (capture/process_group.py) gives each rank its own input back, so such a check
fails, or takes another branch, where the real run's passes.

Which values travel is decided per call, alike on every rank, from what the call is (its
result is not read yet when it is issued, and a value read later may be derived first:
`flag == world_size`, `sizes.max()`): each op of `TRAVELS` whose input tensors each hold at
most `SMALL_BYTES` (flags, counts, lengths, a loss, a few scalars; not a gradient bucket or a
weight shard of a real model), in a world of at most `MAX_WORLD` ranks, on real data (under
`--compute fake` nothing can be read, so nothing travels). Each member posts its input on the
channel (channel.py) before it waits, then computes the result from the members' inputs with
torch's semantics. Larger tensors stay mirrored: nothing is copied between ranks for them.

A member's input that will not come gives the mirrored result, as every other call has: the
member finished without issuing the call, issued another one there (another op, dtype, shape,
reduce op or root: the trace shows the mismatch), or waits itself, through a chain of waiting
ranks, for this rank (a real run would deadlock there; the trace shows the cycle). So a seeded
bug is recorded as before; a healthy program gets the values of its real run.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from tracer.capture.recorder import Call, Recorder
from tracer.capture.work import RecordingWork
from tracer.fake import exchange
from tracer.fake.channel import Channel
from tracer.fake.exchange import fill, tensor_bytes

SMALL_BYTES = 64
"""The most bytes an input tensor of a travelling call holds (8 int64 or 16 float32 values)."""

MAX_WORLD = 32
"""The largest world whose values travel. Every member of a group runs up to a travelling call
before any goes on, and groups chain (tp, dp, the world), so every rank of the world is alive
at once (the executor starts the ranks waited for, beyond -j): beyond this a rank's memory
times the world would not fit one machine, so values stay mirrored, as before."""

TRAVELS = frozenset({"all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "gather", "scatter"})
"""The collectives whose results are computed from the members' inputs; a small send's data
reaches its recv too (the object collectives' travel whatever their size: exchange.py)."""

_REDUCE = {
    "sum": lambda s: s.sum(0),
    "avg": lambda s: s.sum(0) / s.shape[0] if s.is_floating_point() else s.sum(0) // s.shape[0],
    "product": lambda s: s.prod(0),
    "min": lambda s: s.amin(0),
    "max": lambda s: s.amax(0),
    "band": lambda s: _fold(s, torch.bitwise_and),
    "bor": lambda s: _fold(s, torch.bitwise_or),
    "bxor": lambda s: _fold(s, torch.bitwise_xor),
}
"""torch's reductions over the stacked inputs (premul_sum's factor is not in the call: mirrored)."""


def _fold(s: torch.Tensor, fn) -> torch.Tensor:
    out = s[0].clone()
    for t in s[1:]:
        out = fn(out, t)
    return out


def travels(call: Call, world: int) -> bool:
    """Whether `call`'s result is computed from the members' inputs (module docstring)."""
    sized = call.outputs if call.op == "scatter" else call.inputs  # (a scatter's inputs are the root's alone)
    if call.op not in TRAVELS or world > MAX_WORLD or not sized:
        return False
    if call.op in ("all_reduce", "reduce") and call.reduce_op not in _REDUCE:
        return False
    if not all(_plain(t) for t in (*call.inputs, *call.outputs)):
        return False
    return all(t.numel() * t.element_size() <= SMALL_BYTES for t in sized)


def _signature(call: Call, t: torch.Tensor, op: str = "") -> bytes:
    """What both ends must agree on for the data to be the call's (a send and its recv: "p2p")."""
    return f"{op or call.op}|{t.dtype}|{t.numel()}|{call.reduce_op}|{call.root}\n".encode()


@torch.no_grad()
def deliver(ch: Channel, call: Call, group: str, members: tuple[int, ...], k: int) -> bool:
    """Give `call` its real result from the members' inputs (`k`: the call's number on its group,
    counted alike on every rank); False: it falls back to the mirrored result."""
    me, op = ch.rank, call.op
    root = members[int(call.root)] if call.root is not None else -1
    what = f"the value of its {op} #{k} on group {group}"

    def name(r: int, part: str = "") -> str:
        return f"v.{group}.{k}.{r}{part}"

    if op == "scatter":
        if me == root:
            for r, t in zip(members, call.inputs):
                ch.post(name(me, f".{r}"), _signature(call, t) + tensor_bytes(t))
        got = _take(ch, name(root, f".{me}"), root, what, call, call.outputs[0])
        if got is None:
            return False
        fill(call.outputs[0], got, what)
        return True
    own = call.inputs[0]
    if op != "broadcast" or me == root:
        ch.post(name(me), _signature(call, own) + tensor_bytes(own))
    if op == "broadcast":
        if me != root:
            got = _take(ch, name(root), root, what, call, own)
            if got is None:
                return False
            fill(own, got, what)
        return True
    if op in ("reduce", "gather") and me != root:
        return True  # the result is the root's alone
    chunks = []
    for r in members:
        got = tensor_bytes(own) if r == me else _take(ch, name(r), r, what, call, own)
        if got is None:
            return False
        chunks.append(got)
    if op in ("all_reduce", "reduce"):
        stack = torch.stack([_tensor(c, own) for c in chunks])
        own.copy_(_REDUCE[str(call.reduce_op)](stack).to(own.dtype))
    elif op == "all_gather_into_tensor":
        fill(call.outputs[0], b"".join(chunks), what)
    else:  # all_gather, gather: one output per member
        sizes = [o.numel() * o.element_size() for o in call.outputs]
        if sizes != [len(c) for c in chunks]:
            return False  # uneven lists: left mirrored
        for o, c in zip(call.outputs, chunks):
            fill(o, c, what)
    return True


def _p2p(ch: Channel, rec: Recorder, call: Call, indices: dict, group: str, members) -> RecordingWork | None:
    """A small send's data reaches its recv (at the recv's wait, as a real one's); a recv whose
    send never comes, or sends another dtype or size, keeps the mirrored zeros."""
    if call.peer is None or call.peer < 0:
        return None  # recv from any source: which send it matches is the program's timing
    peer = members[int(call.peer)]
    src, dst = (ch.rank, peer) if call.op == "send" else (peer, ch.rank)
    n = ch.next_id(("vp", group, src, dst, call.tag))  # every p2p of the pair counts
    tensors = call.inputs if call.op == "send" else call.outputs
    if len(tensors) != 1 or not _plain(tensors[0]) or tensors[0].numel() * tensors[0].element_size() > SMALL_BYTES:
        return None
    if rec.world_size > MAX_WORLD:
        return None
    t = tensors[0]
    slot = f"vp.{group}.{src}.{dst}.{call.tag}.{n}"
    if call.op == "send":
        ch.post(slot, _signature(call, t, "p2p") + tensor_bytes(t))
        return RecordingWork(rec, indices, call.async_op, outputs=call.inputs)
    what = f"the data of its recv #{n} from rank {peer} on group {group}"

    def arrive() -> None:
        got = _take(ch, slot, peer, what, call, t, "p2p")
        if got is not None:
            fill(t, got, what)

    t.zero_()  # what a mirrored recv holds, until the data arrives
    return RecordingWork(rec, indices, call.async_op, outputs=call.outputs, on_wait=arrive)


def _plain(t) -> bool:
    """Real data in a plain tensor: not fake compute, not a subclass (LocalTensor, DTensor)."""
    return isinstance(t, torch.Tensor) and type(t) is torch.Tensor and t.device.type != "meta" and not is_fake(t)


def _take(ch: Channel, name: str, sender: int, what: str, call: Call, like: torch.Tensor, op: str = "") -> bytes | None:
    """The sender's input to this call, or None (module docstring: the fallback)."""
    data = ch.take_or_none(name, sender, what)
    if data is None:
        return None
    sig, _, payload = data.partition(b"\n")
    if sig + b"\n" != _signature(call, like, op):
        return None  # the sender issued another call at this place
    return payload


def _tensor(data: bytes, like: torch.Tensor) -> torch.Tensor:
    if not data:
        return torch.empty(like.shape, dtype=like.dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(like.dtype).view(like.shape).clone()


def carry(pg, rec: Recorder, call: Call, indices: dict) -> RecordingWork | None:
    """The recording group's `carry` in fake mode: an object collective's call (exchange.carry),
    else a small collective's (above), else None (mirrored)."""
    work = exchange.carry(pg, rec, call, indices)
    ch = Channel.current
    if work is not None or ch is None:
        return work
    g = rec.group_ref(pg)
    if call.op in ("send", "recv"):
        return _p2p(ch, rec, call, indices, g.name, g.ranks)
    k = ch.next_id(("v", g.name))  # every collective of the group counts: ranks stay aligned
    if not travels(call, rec.world_size) or not deliver(ch, call, g.name, g.ranks, k):
        return None
    return RecordingWork(rec, indices, call.async_op, outputs=call.outputs or call.inputs)
