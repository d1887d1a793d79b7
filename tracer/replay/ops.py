"""Inside one replay process: recreate the groups, issue the rank's recorded events on a real
backend, and record what is issued with the same Recorder as a dry run.

Every event is written to the rank's part *before* it is issued, so a process killed while
blocked ends its stream at the op it was stuck in: the post-mortem input `analyzer hang` wants.
The recorded attribution (frame, module, phase, step) is copied to the replay's events, so a
hang report points at the user's source line, not at this file.
"""

from __future__ import annotations

import datetime
import json
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from traceformat.format import Mode
from traceformat.ops import COLLECTIVE, GROUP_OPS, OPS, P2P, P2P_OPS, ROOTED_OPS
from tracer.capture.recorder import Call, GroupRef, Recorder

# gloo has no AVG; PREMUL_SUM is NCCL-only. The wait pattern is what replay reproduces, not values.
_REDUCE = {
    "sum": "SUM",
    "avg": "SUM",
    "product": "PRODUCT",
    "min": "MIN",
    "max": "MAX",
    "band": "BAND",
    "bor": "BOR",
    "bxor": "BXOR",
    "premul_sum": "SUM",
}


class ReplayRecorder(Recorder):
    """A Recorder whose attribution is the recorded event's and whose groups keep their recorded
    names, so the replay trace lines up with the trace it replays."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.current: tuple = ("", "other", 0, "", "")
        self.refs: dict[int, GroupRef] = {}

    def where(self) -> tuple:
        return self.current

    def group_ref(self, pg) -> GroupRef:
        return self.refs.get(id(pg)) or super().group_ref(pg)


def _tensors(shapes, dtype: torch.dtype) -> list[torch.Tensor]:
    return [torch.zeros(tuple(s), dtype=dtype) for s in shapes or ()]


def _dtype(name) -> torch.dtype:
    dt = getattr(torch, name, None) if isinstance(name, str) else None
    return dt if isinstance(dt, torch.dtype) else torch.float32


def _group_rank(pg, rank: int) -> int | None:
    return None if rank < 0 else dist.get_group_rank(pg, rank)


class RankReplay:
    """The state of one rank's replay: its groups, its in-flight works, its timings."""

    def __init__(self, rank: int, groups: dict[int, dict], rec: ReplayRecorder):
        self.rank = rank
        self.groups = groups  # gid -> {name, ranks, desc} of the replayed trace
        self.rec = rec
        self.pgs: dict[int, object] = {}  # gid -> ProcessGroup (members only)
        self.works: dict[int, tuple] = {}  # recorded idx -> (Work, replay idx, t0, ev)
        self.stats: list[list] = []  # [op, gid, bytes, seconds] per completed comm event

    # ---- groups --------------------------------------------------------------------------
    def create(self, ev: dict, timeout: datetime.timedelta) -> None:
        g = self.groups[ev["group"]]
        ref = GroupRef(g["name"], tuple(g["ranks"]), g["desc"])
        desc = None if g["desc"] == "undefined" else g["desc"]
        if ev["op"] == "init_process_group":
            pg = c10d._get_default_group()
        elif ev["op"] == "new_group":
            # every rank calls new_group for every group, members or not, as torch requires
            pg = dist.new_group(g["ranks"], timeout=timeout, group_desc=desc)
        else:  # split_group: gloo cannot split, and only subgroup members recorded the call
            pg = dist.new_group(g["ranks"], timeout=timeout, use_local_synchronization=True, group_desc=desc)
        member = self.rank in g["ranks"]
        if member and pg is not None and pg != dist.GroupMember.NON_GROUP_MEMBER:
            self.pgs[ev["group"]] = pg
            self.rec.refs[id(pg)] = ref
        self.rec.note_group(ev["op"], ref, {"api": ev["op"]})

    # ---- comm ----------------------------------------------------------------------------
    def issue(self, evs: list[dict]) -> None:
        """One event, or the p2p events of one batch_isend_irecv."""
        ev = evs[0]
        if ev["op"] == "wait":
            self._wait(ev)
            return
        self.rec.current = (
            ev["module"] or "",
            ev["phase"] or "other",
            ev["step"],
            ev["frame"] or "",
            ev.get("user_frame") or "",
        )
        pg = self.pgs.get(ev["group"])
        if pg is None:
            raise RuntimeError(f"event {ev['idx']} ({ev['op']}) uses group {ev['group']} that this rank never created")
        if len(evs) > 1 or (ev["batch"] >= 0 and ev["op"] in P2P_OPS):
            self._batch(evs, pg)
            return
        call = self._call(ev, pg)
        idx = self.rec.record(call)[self.rank]
        t0 = time.perf_counter()
        work = _run(call, ev, pg)
        if call.async_op:
            self.works[ev["idx"]] = (work, idx, t0, ev)
        else:
            self._done(ev, t0)

    def _call(self, ev: dict, pg) -> Call:
        dt = _dtype(ev["dtype"])
        root = _group_rank(pg, ev["peer"]) if ev["op"] in ROOTED_OPS else None
        peer = _group_rank(pg, ev["peer"]) if ev["op"] in P2P_OPS else None
        splits = tuple(ev["splits"]) if ev["splits"] else None
        return Call(
            ev["op"],
            pg,
            _tensors(ev["in_shapes"], dt),
            _tensors(ev["out_shapes"], dt),
            ev["reduce_op"],
            root=root,
            peer=peer,
            tag=max(ev["tag"], 0),
            splits=splits,
            async_op=bool(ev["async_op"]),
        )

    def _batch(self, evs: list[dict], pg) -> None:
        ops, indices = [], []
        t0 = time.perf_counter()
        for ev in evs:
            call = self._call(ev, self.pgs[ev["group"]])
            call.async_op = True
            indices.append(self.rec.record(call)[self.rank])
            fn = dist.isend if ev["op"] == "send" else dist.irecv
            tensor = (call.inputs or call.outputs)[0]
            ops.append(dist.P2POp(fn, tensor, ev["peer"], self.pgs[ev["group"]], call.tag))
        for ev, idx, work in zip(evs, indices, dist.batch_isend_irecv(ops)):
            self.works[ev["idx"]] = (work, idx, t0, ev)

    def _wait(self, ev: dict) -> None:
        entry = self.works.pop(ev["ref"], None)
        if entry is None:
            return  # a wait on an op not replayed (outside --steps, or a non-comm op)
        work, idx, t0, op_ev = entry
        self.rec.current = (
            ev["module"] or "",
            ev["phase"] or "other",
            ev["step"],
            ev["frame"] or "",
            ev.get("user_frame") or "",
        )
        self.rec.waited({self.rank: idx})
        if work is not None:
            work.wait()
        self._done(op_ev, t0)

    def _done(self, ev: dict, t0: float) -> None:
        self.stats.append([ev["op"], ev["group"], max(ev["in_bytes"], ev["out_bytes"]), time.perf_counter() - t0])

    def finish(self) -> None:
        """Works the program never waited on (fire-and-forget isend) still complete before exit."""
        for work, _, _, _ in self.works.values():
            if work is not None:
                work.wait()
        self.works.clear()


def _run(call: Call, ev: dict, pg):
    """Issue `call` through the c10d API (the path a program takes); returns its Work or None.
    Which API is read off the op table; a coalesced op goes through the coalescing manager, which
    dispatches c10d's *_coalesced op as the program did, one tensor or many."""
    op, ins, outs, a = call.op, call.inputs, call.outputs, call.async_op
    kind = OPS.get(op)
    if kind is None or kind.kind not in (COLLECTIVE, P2P) or kind.uneven:
        raise RuntimeError(f"replay does not know op {op!r}")
    red = getattr(dist.ReduceOp, _REDUCE.get(call.reduce_op or "sum", "SUM"))
    root = ev["peer"]
    if kind.kind == P2P:  # a send passes its tensor, a recv receives one
        if ins:
            return (dist.isend if a else dist.send)(ins[0], root, group=pg, tag=call.tag)
        return (dist.irecv if a else dist.recv)(outs[0], None if root < 0 else root, group=pg, tag=call.tag)
    if kind.rooted:
        if kind.in_place:
            if kind.reduces:
                return dist.reduce(ins[0], root, red, group=pg, async_op=a)
            return dist.broadcast(ins[0], root, group=pg, async_op=a)
        if kind.each_output == "input":
            return dist.gather(ins[0], outs or None, root, group=pg, async_op=a)
        return dist.scatter(outs[0], ins or None, root, group=pg, async_op=a)
    if kind.size_factor < 0:
        # gloo has no reduce_scatter: an all_reduce of the input enters and leaves the group at
        # the same points (every member, one instance), which is what a replay must reproduce
        flat = torch.cat([t.reshape(-1) for t in ins]) if ins else torch.zeros(1)
        return dist.all_reduce(flat, red, group=pg, async_op=a)
    if kind.in_place:  # all-reduces
        if not kind.coalesced:
            return dist.all_reduce(ins[0], red, group=pg, async_op=a)
        return _coalesced([lambda t=t: dist.all_reduce(t, red, group=pg) for t in ins], pg, a)
    if kind.size_factor > 0:
        if not kind.flat and not kind.coalesced:
            return dist.all_gather(outs, ins[0], group=pg, async_op=a)
        if not kind.coalesced:
            return dist.all_gather_into_tensor(outs[0], ins[0], group=pg, async_op=a)
        if not kind.flat:  # all_gather_coalesced: one output list per input, gathered flat
            n = len(outs) // max(len(ins), 1)
            outs = [torch.cat([o.reshape(-1) for o in outs[k * n : (k + 1) * n]]) for k in range(len(ins))]
        return _coalesced(
            [lambda o=o, i=i: dist.all_gather_into_tensor(o, i, group=pg) for o, i in zip(outs, ins)], pg, a
        )
    if kind.each_output == "chunk":
        # gloo has only the single-tensor all_to_all: flatten the lists and pass their sizes
        ins_f, outs_f = torch.cat([t.reshape(-1) for t in ins]), torch.cat([t.reshape(-1) for t in outs])
        return dist.all_to_all_single(
            outs_f, ins_f, [t.numel() for t in outs], [t.numel() for t in ins], group=pg, async_op=a
        )
    if kind.splits:
        in_s, out_s = (list(s) for s in ev["splits"]) if ev["splits"] else (None, None)
        return dist.all_to_all_single(outs[0], ins[0], out_s, in_s, group=pg, async_op=a)
    return dist.barrier(group=pg, async_op=a)  # the one collective of no tensors


def _coalesced(issues: list, pg, async_op: bool):
    """The coalesced c10d calls (what the coalescing manager issues) for a list of ops."""
    with c10d._coalescing_manager(group=pg, async_ops=True) as cm:
        for issue in issues:
            issue()
    if async_op:
        return cm
    cm.wait()
    return None


def replay_rank(
    *,
    rank: int,
    world_size: int,
    init_method: str,
    plan: list[dict],
    groups: dict[int, dict],
    parts_dir: str,
    config: dict,
    timeout_s: float,
) -> int:
    """The body of one replay process. Returns its exit status (0 ok, 3 failed)."""
    os.setpgrp()  # own process group: the driver kills it with everything it started
    timeout = datetime.timedelta(seconds=max(timeout_s, 1.0) + 600)  # the driver's timeout governs
    rec = ReplayRecorder(
        mode=Mode.REPLAY.value, world_size=world_size, ranks=[rank], parts_dir=parts_dir, config=config
    )
    state = RankReplay(rank, groups, rec)
    status, error = "ok", None
    try:
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size, timeout=timeout)
        open(os.path.join(parts_dir, f"ready_{rank:05d}"), "w").close()  # starts the driver's timeout
        i = 0
        while i < len(plan):
            ev = plan[i]
            if ev["op"] in GROUP_OPS:
                state.create(ev, timeout)
                i += 1
                continue
            batch = [ev]
            if ev["batch"] >= 0 and ev["op"] in P2P_OPS:  # one batch_isend_irecv
                while (
                    i + len(batch) < len(plan)
                    and plan[i + len(batch)]["batch"] == ev["batch"]
                    and plan[i + len(batch)]["op"] in P2P_OPS
                ):
                    batch.append(plan[i + len(batch)])
            state.issue(batch)
            i += len(batch)
        state.finish()
    except BaseException as e:  # one line in the stream's end record; the driver reports it
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        # gloo prefixes errors with "[file:line]", which console renderers take for markup
        status, error = "error", f"{type(e).__name__}: {msg.replace('[', '(').replace(']', ')')}"
    finally:
        rec.close(status, error)
        with open(os.path.join(parts_dir, f"stats_{rank:05d}.json"), "w") as f:
            json.dump(state.stats, f)
        if dist.is_initialized() and status == "ok":
            dist.destroy_process_group()
    return 0 if status == "ok" else 3
