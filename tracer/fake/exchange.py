"""What a carried call (channel.carry) really delivers between fake-mode ranks.

Each member posts what it contributes and takes what it receives, with torch's semantics:
all_gather (every member gets every member's input), broadcast (the root's), gather (the root
gets every member's), scatter (member i gets the root's i-th input), send / recv (the
receiver gets what its peer sent, in order per (group, sender, receiver, tag)). Bytes travel
as they are in memory, so any dtype (incl. bfloat16) round-trips. Other collectives are not
issued by the object APIs; inside a carried call they keep mirrored data.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tracer.capture.recorder import Call, Recorder, RecordError
from tracer.capture.work import RecordingWork
from tracer.fake import channel
from tracer.fake.channel import Channel

CARRIED = frozenset({"all_gather", "all_gather_into_tensor", "broadcast", "gather", "scatter", "send", "recv"})


def tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().contiguous().cpu()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


@torch.no_grad()
def fill(t: torch.Tensor, data: bytes, what: str) -> None:
    want = t.numel() * t.element_size()
    if len(data) != want:
        raise RecordError(f"{what}: {len(data)} bytes sent into a buffer of {want} bytes ({tuple(t.shape)} {t.dtype})")
    if want:
        src = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(t.dtype).view(t.shape)
        t.copy_(src)


def carry(pg, rec: Recorder, call: Call, indices: dict) -> RecordingWork | None:
    """The recording group's `carry` in fake mode: the Work of a call whose tensors really travel
    (an object collective's, inside channel.carry), or None (mirrored as any other)."""
    if call.op not in CARRIED or not channel.carrying():
        return None
    g = rec.group_ref(pg)
    ch = channel.Channel.current
    assert ch is not None  # carrying(): a channel is open
    done = exchange(ch, call, g.name, g.ranks)
    return RecordingWork(rec, indices, call.async_op, outputs=call.outputs or call.inputs, on_wait=done)


def exchange(ch: Channel, call: Call, group: str, members: tuple[int, ...]) -> Callable[[], None] | None:
    """Move `call`'s data for real; returns what a recv still has to do at its wait(), if any."""
    op = call.op
    if op in ("send", "recv"):
        peer = members[int(call.peer)]  # type: ignore[arg-type]  # a p2p call has a peer
        src, dst = (ch.rank, peer) if op == "send" else (peer, ch.rank)
        key = ("p", group, src, dst, call.tag)
        slot = f"p.{group}.{src}.{dst}.{call.tag}.{ch.next_id(key)}"
        if op == "send":
            ch.post(slot, b"".join(tensor_bytes(t) for t in call.inputs))
            return None
        what = f"{channel.label()} (its {op} #{slot.rsplit('.', 1)[-1]} on group {group})"
        return lambda: _fill_all(call.outputs, ch.take(slot, peer, what), what)
    k = ch.next_id(("c", group))

    def name(r: int) -> str:
        return f"c.{group}.{k}.{r}"

    what = f"{channel.label()} (its {op} #{k} on group {group})"
    if op in ("all_gather", "all_gather_into_tensor", "gather"):
        ch.post(name(ch.rank), tensor_bytes(call.inputs[0]))
        root = members[int(call.root)] if op == "gather" else ch.rank  # type: ignore[arg-type]
        if ch.rank != root or not call.outputs:
            return None
        chunks = [ch.take(name(r), r, what) for r in members]
        if op == "all_gather_into_tensor":
            fill(call.outputs[0], b"".join(chunks), what)
        else:
            for o, data in zip(call.outputs, chunks):
                fill(o, data, what)
    elif op == "broadcast":
        root = members[int(call.root)]  # type: ignore[arg-type]  # a rooted call has a root
        if ch.rank == root:
            ch.post(name(root), tensor_bytes(call.inputs[0]))
        else:
            fill(call.outputs[0], ch.take(name(root), root, what), what)
    elif op == "scatter":
        root = members[int(call.root)]  # type: ignore[arg-type]  # a rooted call has a root
        if ch.rank == root:
            for i, r in enumerate(members):
                ch.post(f"{name(root)}.{r}", tensor_bytes(call.inputs[i]))
        fill(call.outputs[0], ch.take(f"{name(root)}.{ch.rank}", root, what), what)
    return None


def _fill_all(outs: list, data: bytes, what: str) -> None:
    if len(outs) == 1:
        fill(outs[0], data, what)
        return
    at = 0
    for o in outs:
        size = o.numel() * o.element_size()
        fill(o, data[at : at + size], what)
        at += size
