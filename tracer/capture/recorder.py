"""The recorder: turns normalized calls into events, one stream (part file) per simulated rank.

Capture hooks (process group, LocalTensor dispatch, group / mesh / DTensor patches) describe
what happened as a `Call` or a plain event; the recorder knows which simulated ranks it
happened on (one in fake mode, every member in local mode), numbers it per group, attributes
it and streams it. Nothing here touches tensor data.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from traceformat import format as fmt
from traceformat.ops import COLLECTIVE_OPS, OPS, P2P_OPS
from traceformat.parts import part_path
from traceformat.writer import TraceWriter
from tracer.capture.attribution import Attribution
from tracer.capture.code_paths import ProgramCode


class RecordError(RuntimeError):
    """A program asked for something a recording cannot give (one-line message)."""


@dataclass(frozen=True, slots=True)
class GroupRef:
    """A process group as every rank can name it: torch's group name, members, description."""

    name: str
    ranks: tuple[int, ...]
    desc: str
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # hashed once: events look their group up by it, and hashing the member tuple on every
        # event costs microseconds for a group of thousands of ranks
        object.__setattr__(self, "_hash", hash((self.name, self.ranks, self.desc)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):  # hashed again where unpickled: str hashes differ between processes
        return (GroupRef, (self.name, self.ranks, self.desc))


@dataclass(slots=True)
class Call:
    """One collective or p2p call as the hooks saw it. Tensors may be LocalTensors."""

    op: str
    pg: Any
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    reduce_op: str | None = None
    root: int | None = None  # group rank of the root
    peer: int | None = None  # group rank of the p2p peer
    tag: int = -1
    splits: tuple | None = None  # (input_split_sizes, output_split_sizes), may be per-rank ints
    async_op: bool = False


_AT = fmt.COLUMN_AT
_OP, _GROUP, _MODULE, _PHASE, _STEP, _FRAME, _USER_FRAME, _PARENT, _BATCH, _TS = (
    _AT[name] for name in ("op", "group", "module", "phase", "step", "frame", "user_frame", "parent", "batch", "ts")
)
_ATOM_VALUES = ("dtype", "in_shapes", "out_shapes", "reduce_op", "splits", "info")  # given by value, stored as ids
_DTYPE_NAMES: dict[torch.dtype, str] = {}


def tensor_dtype(t) -> str:
    name = _DTYPE_NAMES.get(t.dtype)
    if name is None:
        name = _DTYPE_NAMES[t.dtype] = str(t.dtype).removeprefix("torch.")
    return name


class RankStream:
    """The event stream of one simulated rank: its part file, counters and context."""

    def __init__(self, rank: int, path: str, header: dict):
        self.rank = rank
        self.path = path
        self.writer = TraceWriter(path, header, mapped=True)
        self.n = 0
        self.gids: dict[GroupRef, int] = {}
        self.seq: dict[Any, int] = defaultdict(int)
        self.parents: list[int] = []
        self.t0 = time.perf_counter()
        self.closed = False

    def gid(self, g: GroupRef) -> int:
        gid = self.gids.get(g)
        if gid is None:
            gid = self.gids[g] = len(self.gids)
            self.writer.group(gid, g.name, list(g.ranks), g.desc)
        return gid

    def close(self, status: str = "ok", error: str | None = None, error_text: str | None = None) -> None:
        if not self.closed:
            self.writer.end(self.rank, self.n, status, error, error_text)
            self.writer.footer()
            self.writer.close()
            self.closed = True


class Recorder:
    """Owns the rank streams of this process and writes every event."""

    def __init__(
        self,
        *,
        mode: str,
        world_size: int,
        ranks: list[int],
        parts_dir: str,
        config: dict | None = None,
        root: str | None = None,
        program: ProgramCode | None = None,
    ):
        self.mode = mode
        self.world_size = world_size
        self.ranks = list(ranks)
        self.attribution = Attribution(root, program)
        created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.streams: dict[int, RankStream] = {}
        for r in self.ranks:
            header = fmt.make_header(
                world_size=world_size,
                ranks=[r],
                mode=mode,
                config=config,
                torch_version=torch.__version__,
                created=created,
                part=True,
            )
            self.streams[r] = RankStream(r, part_path(parts_dir, r), header)
        self._batch = -1
        self._batches = 0
        self._pg_refs: dict[int, GroupRef] = {}
        self._members_here: dict[GroupRef, list[int]] = {}
        # group creations seen, for finding a LocalTensor group's siblings: (desc, ranks) -> names
        self.created: dict[tuple[str, tuple[int, ...]], list[str]] = defaultdict(list)
        # per-rank view of a value: identity in fake mode, the rank's shard in local mode
        self.view: Callable[[Any, int], Any] = own_view
        self.siblings: Callable[[Any, GroupRef], list[GroupRef]] = lambda pg, g: [g]
        self.busy = False  # set while LocalTensorMode answers an op, so nested ops are not recorded twice

    # ---- groups -------------------------------------------------------------------------
    def group_ref(self, pg) -> GroupRef:
        ref = self._pg_refs.get(id(pg))
        if ref is None:
            ranks = tuple(dist.get_process_group_ranks(pg))
            ref = self._pg_refs[id(pg)] = GroupRef(str(pg.group_name), ranks, str(pg.group_desc))
        return ref

    def note_group(self, op: str, g: GroupRef, info: dict | None = None, on_ranks: list[int] | None = None) -> None:
        """A group creation call that every rank in `on_ranks` (default: all streams) made."""
        if g.name not in self.created[(g.desc, g.ranks)]:
            self.created[(g.desc, g.ranks)].append(g.name)
        where = self.where()
        for r in on_ranks if on_ranks is not None else self.ranks:
            self.event(r, op, g, where, info=dict(info or {}, member=r in g.ranks))

    def members_here(self, g: GroupRef) -> list[int]:
        """The members of `g` this process records, in group order (cached per GroupRef: a
        fake-mode rank in a 1,024-rank group looks at one rank per event, not 1,024)."""
        here = self._members_here.get(g)
        if here is None:
            here = self._members_here[g] = [r for r in g.ranks if r in self.streams]
        return here

    # ---- events -------------------------------------------------------------------------
    def where(self) -> tuple[str, str, int, str, str]:
        """(module, phase, step, frame, user frame) of the op being recorded; computed once per call."""
        return self.attribution.where()

    def event(self, rank: int, op: str, group: GroupRef | None = None, where: tuple | None = None, **values) -> int:
        s = self.streams[rank]
        w = s.writer
        module, phase, step, frame, user_frame = where or self.where()
        gid = -1 if group is None else s.gid(group)
        if op in COLLECTIVE_OPS:
            values["seq"] = s.seq[gid]
            s.seq[gid] += 1
        elif op in P2P_OPS:
            pair = (rank, values["peer"]) if op == "send" else (values["peer"], rank)
            values["seq"] = s.seq[(gid, pair)]
            s.seq[(gid, pair)] += 1
        # the row filled by index: on the path of every event (fmt.default_row's keywords cost
        # a dict and a loop more)
        row = fmt.empty_row()
        atom = w.atom
        for name, value in values.items():
            row[_AT[name]] = value
        for name in _ATOM_VALUES:  # interned in this order: atom ids are part of a golden's bytes
            if name in values:
                row[_AT[name]] = atom(values[name])
        row[_OP] = atom(op)
        row[_GROUP] = gid
        row[_MODULE] = atom(module)
        row[_PHASE] = atom(phase)
        row[_STEP] = step
        row[_FRAME] = atom(frame)
        row[_USER_FRAME] = atom(user_frame) if user_frame else -1
        if s.parents:
            row[_PARENT] = s.parents[-1]
        row[_BATCH] = self._batch
        row[_TS] = time.perf_counter() - s.t0
        w.row(rank, row)
        s.n += 1
        return s.n - 1

    def record(self, call: Call) -> dict[int, int]:
        """Write `call` on every simulated rank it ran on; returns {rank: event index}."""
        out: dict[int, int] = {}
        where = self.where()
        mapped = self.view is not own_view
        for g in self.siblings(call.pg, self.group_ref(call.pg)):
            for r in self.members_here(g):
                if mapped:
                    ins = [self.view(t, r) for t in call.inputs]
                    outs = [self.view(t, r) for t in call.outputs]
                else:  # fake mode: each tensor is this rank's own (no call per tensor)
                    ins, outs = call.inputs, call.outputs
                is_root = call.root is not None and 0 <= call.root < len(g.ranks) and g.ranks[call.root] == r
                if call.op == "scatter" and not is_root:
                    ins = []  # only the root passes a scatter list (LocalTensor passes one everywhere)
                if call.op == "gather" and not is_root:
                    outs = []
                values: dict[str, Any] = dict(
                    in_shapes=tuple([tuple(t.shape) for t in ins]),
                    out_shapes=tuple([tuple(t.shape) for t in outs]),
                    in_bytes=sum([t.numel() * t.element_size() for t in ins]),
                    out_bytes=sum([t.numel() * t.element_size() for t in outs]),
                    async_op=int(call.async_op),
                    tag=call.tag,
                )
                first = ins or outs
                if first:
                    values["dtype"] = tensor_dtype(first[0])
                if call.reduce_op is not None:
                    values["reduce_op"] = call.reduce_op
                if call.root is not None:
                    values["peer"] = g.ranks[call.root] if 0 <= call.root < len(g.ranks) else -1
                if call.peer is not None:
                    values["peer"] = g.ranks[call.peer] if 0 <= call.peer < len(g.ranks) else -1
                if OPS[call.op].splits:
                    values["splits"] = _a2a_splits(
                        call.splits, ins[0], outs[0], len(g.ranks), lambda x, r=r: self.view(x, r)
                    )
                out[r] = self.event(r, call.op, g, where, **values)
        return out

    def waited(self, indices: dict[int, int]) -> None:
        where = self.where()
        for r, idx in indices.items():
            self.event(r, "wait", where=where, ref=idx)

    # ---- context ------------------------------------------------------------------------
    @contextlib.contextmanager
    def batch(self):
        """Events inside share a batch id (coalescing manager, batch_isend_irecv)."""
        if self._batch >= 0:
            yield
            return
        self._batch = self._batches
        self._batches += 1
        try:
            yield
        finally:
            self._batch = -1

    @contextlib.contextmanager
    def parent(self, indices: dict[int, int]):
        """Collectives inside are linked to the (redistribute) events in `indices`."""
        for r, i in indices.items():
            self.streams[r].parents.append(i)
        try:
            yield
        finally:
            for r in indices:
                self.streams[r].parents.pop()

    def close(
        self,
        status: str = "ok",
        error: str | None = None,
        ranks: list[int] | None = None,
        error_text: str | None = None,
    ) -> None:
        """Close the streams (of `ranks`, default all) with how the run ended: `error` one line,
        `error_text` the whole error where it has more lines (TraceWriter.end)."""
        for r in ranks if ranks is not None else self.ranks:
            self.streams[r].close(status, error, error_text)


def own_view(x, rank: int):
    """The recorder's default per-rank view: a value is the rank's own (fake mode)."""
    return x


def _a2a_splits(splits, inp, out, n: int, view) -> tuple:
    """[input_split_sizes, output_split_sizes] with torch's default of equal splits filled in."""
    in_s, out_s = splits if splits is not None else ([], [])
    in_s = tuple(int(view(x)) for x in in_s) or (inp.shape[0] // n,) * n
    out_s = tuple(int(view(x)) for x in out_s) or (out.shape[0] // n,) * n
    return (in_s, out_s)
