"""Synthetic pipeline-parallel traces at scale, with seeded faults: pp x dp x tp ranks.

    python bench/synth_pp.py -o pp.trace --pp 16 --tp 8 --dp 128 --events 5000 [--schedule interleaved]
        [--swap R] [--skip-send R] [--extra R]

Ranks are laid out as TorchTitan's mesh [pp, dp, tp] (tp innermost): rank = (stage * dp + d) * tp + t;
p2p runs on the pp group of (d, t). Per microbatch and stage: forward = receive the activation,
`layers` tp all-reduces, send it on; backward the same with gradients, upstream. Each step ends
with `dp_ops` all-reduces on the dp group (gradient sync).

Schedules, each with the p2p semantics its implementations use:
- "1f1b" (Megatron's 1F1B): blocking send / recv, the steady-state exchanges fused as
  send_forward_recv_backward / send_backward_recv_forward, ordered so that rendezvous sends
  cannot deadlock (the upstream stage sends first, the downstream one receives first).
- "interleaved" (Interleaved1F1B, 2 model chunks per stage, Megatron's order; needs microbatches
  % pp == 0): async isend / irecv as torch.distributed.pipelining issues them, a recv waited just
  before its compute, the sends waited at the end of the step.

Faults (one rank each, a rank-dependent bug): --swap R: rank R's stage, in the middle step's
third steady-state exchange, receives the gradient before sending the activation (1f1b: a real
deadlock with its downstream peer); --skip-send R: R never sends its last microbatch's gradient
upstream in the last step (its upstream peer's recv is unmatched); --extra R: one extra dp
all-reduce on R after step 1 (a missing_collective on R). Written directly as column blocks.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from traceformat import format as fmt
from traceformat.writer import TraceWriter

MICROBATCHES = 32
LAYERS = 2
DP_OPS = 4


def layout(pp: int, dp: int, tp: int):
    """Group ids: world 0, then tp groups, dp groups, pp groups (p2p)."""
    n_tp, n_dp = pp * dp, pp * tp

    def tp_gid(s, d):
        return 1 + s * dp + d

    def dp_gid(s, t):
        return 1 + n_tp + s * tp + t

    def pp_gid(d, t):
        return 1 + n_tp + n_dp + d * tp + t

    def rank(s, d, t):
        return (s * dp + d) * tp + t

    return tp_gid, dp_gid, pp_gid, rank


def generate(
    path: str,
    pp: int = 16,
    dp: int = 128,
    tp: int = 8,
    events: int = 5000,
    schedule: str = "1f1b",
    microbatches: int = MICROBATCHES,
    swap: int | None = None,
    skip_send: int | None = None,
    extra: int | None = None,
    verbose: bool = True,
) -> None:
    ranks = pp * dp * tp
    header = fmt.make_header(
        world_size=ranks,
        ranks=list(range(ranks)),
        mode="fake",
        torch_version="synthetic",
        config={"program": f"synthetic pp x dp x tp, {pp} x {dp} x {tp}, {schedule}"},
    )
    w = TraceWriter(path, header)
    try:
        _write(w, pp, dp, tp, events, schedule, microbatches, swap, skip_send, extra, verbose)
    finally:
        w.close()


def _write(w, pp, dp, tp, events, schedule, m, swap, skip_send, extra, verbose) -> None:
    tp_gid, dp_gid, pp_gid, rank_of = layout(pp, dp, tp)
    ranks = pp * dp * tp
    w.group(0, "0", list(range(ranks)), "default_pg")
    for s in range(pp):
        for d in range(dp):
            w.group(tp_gid(s, d), str(tp_gid(s, d)), [rank_of(s, d, t) for t in range(tp)], "mesh_tp")
    for s in range(pp):
        for t in range(tp):
            w.group(dp_gid(s, t), str(dp_gid(s, t)), [rank_of(s, d, t) for d in range(dp)], "mesh_dp")
    for d in range(dp):
        for t in range(tp):
            w.group(pp_gid(d, t), str(pp_gid(d, t)), [rank_of(s, d, t) for s in range(pp)], "mesh_pp")
    per_step = len(_stage_ops(pp, pp // 2, m, schedule, 1, None))
    steps = max(1, round(events / per_step))
    atoms = _Atoms(w)
    templates: dict = {}
    start, every = time.perf_counter(), max(1, ranks // 8)
    for r in range(ranks):
        s, rest = divmod(r, dp * tp)
        d, t = divmod(rest, tp)
        fault = "swap" if r == swap else "skip" if r == skip_send else "extra" if r == extra else None
        key = (s, fault)
        if key not in templates:
            templates[key] = atoms.columns(_stage_ops(pp, s, m, schedule, steps, fault))
        cols = dict(templates[key])
        kind = cols.pop("_gkind")
        peer_stage = cols.pop("_peer")
        group = np.full(len(kind), -1, dtype=np.int32)
        group[kind == 1] = tp_gid(s, d)
        group[kind == 2] = dp_gid(s, t)
        group[kind == 3] = pp_gid(d, t)
        cols["group"] = group
        cols["peer"] = np.where(peer_stage >= 0, (peer_stage * dp + d) * tp + t, -1).astype(np.int32)
        w.block(r, cols)
        w.end(r, len(kind))
        if verbose and r % every == 0 and r:
            print(f"  {r}/{ranks} ranks written ({time.perf_counter() - start:.1f} s)", flush=True)
    w.footer()


def _stage_ops(pp: int, s: int, m: int, schedule: str, steps: int, fault: str | None) -> list[tuple]:
    """One stage's stream: (op, group kind 0 none / 1 tp / 2 dp / 3 pp, peer stage, async, ref, step,
    phase, frame)."""
    ops: list[tuple] = []
    for step in range(steps):
        mid, last = step == steps // 2, step == steps - 1
        if schedule == "1f1b":
            _one_f_one_b(ops, pp, s, m, step, fault if mid else None, fault == "skip" and last)
        else:
            _interleaved(ops, pp, s, m, step, fault == "skip" and last)
        for _ in range(DP_OPS + (1 if fault == "extra" and step == 1 else 0)):
            ops.append(("all_reduce", 2, -1, 0, -1, step, "optimizer", "train.py:90 in sync_grads"))
    return ops


def _compute(ops, step, phase, frame) -> None:
    for _ in range(LAYERS):
        ops.append(("all_reduce", 1, -1, 0, -1, step, phase, frame))


def _one_f_one_b(ops, pp, s, m, step, fault, skip_last) -> None:
    first, last = s == 0, s == pp - 1
    warm = min(pp - s - 1, m)

    def send(to, phase):
        ops.append(("send", 3, to, 0, -1, step, phase, "schedules.py:120 in send"))

    def recv(frm, phase):
        ops.append(("recv", 3, frm, 0, -1, step, phase, "schedules.py:110 in recv"))

    def fwd():
        _compute(ops, step, "forward", "model.py:40 in forward")

    def bwd():
        _compute(ops, step, "backward", "model.py:60 in backward")

    for _ in range(warm):
        if not first:
            recv(s - 1, "forward")
        fwd()
        if not last:
            send(s + 1, "forward")
    rest = m - warm
    if rest and not first:
        recv(s - 1, "forward")
    for i in range(rest):
        fwd()
        if not last:  # send_forward_recv_backward: upstream side sends first
            if fault == "swap" and i == 2:
                recv(s + 1, "backward")
                send(s + 1, "forward")
            else:
                send(s + 1, "forward")
                recv(s + 1, "backward")
        bwd()
        if not first:
            if i == rest - 1:
                if not (skip_last and warm == 0):
                    send(s - 1, "backward")
            else:  # send_backward_recv_forward: downstream side receives first
                recv(s - 1, "forward")
                send(s - 1, "backward")
    for j in range(warm):
        if not last:
            recv(s + 1, "backward")
        bwd()
        if not first and not (skip_last and j == warm - 1):
            send(s - 1, "backward")


def _interleaved(ops, pp, s, m, step, skip_last, chunks: int = 2) -> None:
    total = m * chunks
    warm = min((pp - s - 1) * 2 + (chunks - 1) * pp, total)

    def unit(k, forward):
        c = (k // pp) % chunks
        return (c if forward else chunks - 1 - c), (k // (pp * chunks)) * pp + k % pp

    order = [(True, k) for k in range(warm)]
    for i in range(total - warm):
        order += [(True, warm + i), (False, i)]
    order += [(False, k) for k in range(total - warm, total)]
    sends = []
    for n, (forward, k) in enumerate(order):
        c, _ = unit(k, forward)
        vs = c * pp + s
        phase = "forward" if forward else "backward"
        edge_in = vs > 0 if forward else vs < pp * chunks - 1
        edge_out = vs < pp * chunks - 1 if forward else vs > 0
        frm = (s - 1) % pp if forward else (s + 1) % pp
        to = (s + 1) % pp if forward else (s - 1) % pp
        if edge_in:  # irecv, waited before the compute
            ops.append(("recv", 3, frm, 1, -1, step, phase, "schedules.py:210 in _recv"))
            ops.append(("wait", 0, -1, 0, len(ops) - 1, step, phase, "schedules.py:212 in _wait"))
        _compute(ops, step, phase, f"model.py:{40 if forward else 60} in {phase}")
        if edge_out and not (skip_last and n == len(order) - 1):  # isend, waited at the step's end
            ops.append(("send", 3, to, 1, -1, step, phase, "schedules.py:220 in _send"))
            sends.append(len(ops) - 1)
    for i in sends:
        ops.append(("wait", 0, -1, 0, i, step, "backward", "schedules.py:240 in _wait_sends"))


class _Atoms:
    """Turns a stage's op tuples into format columns (sequence numbers per group / channel)."""

    def __init__(self, w) -> None:
        self.a = w.atom
        self.f32, self.act, self.sum = (self.a("float32"), self.a(((4, 512),)), self.a("sum"))
        self.none = self.a(())

    def columns(self, ops: list[tuple]) -> dict:
        n = len(ops)
        cols = {name: np.full(n, 0 if dt == "u1" else -1, dtype=dt) for name, dt in fmt.COLUMNS}
        a = self.a
        names = {o[0] for o in ops} | {o[6] for o in ops} | {o[7] for o in ops}
        ids = {x: a(x) for x in sorted(names)}
        op = np.array([ids[o[0]] for o in ops], dtype=np.int32)
        gkind = np.array([o[1] for o in ops], dtype=np.int8)
        peer = np.array([o[2] for o in ops], dtype=np.int32)
        cols["op"] = op
        cols["async_op"] = np.array([o[3] for o in ops], dtype=np.uint8)
        cols["ref"] = np.array([o[4] for o in ops], dtype=np.int32)
        cols["step"] = np.array([o[5] for o in ops], dtype=np.int32)
        cols["phase"] = np.array([ids[o[6]] for o in ops], dtype=np.int32)
        cols["frame"] = np.array([ids[o[7]] for o in ops], dtype=np.int32)
        comm = gkind > 0
        cols["dtype"][comm] = self.f32
        cols["in_shapes"][comm] = self.act
        cols["out_shapes"][comm] = self.act
        cols["in_bytes"][comm] = 8192
        cols["out_bytes"][comm] = 8192
        cols["reduce_op"][gkind == 1] = self.sum
        cols["reduce_op"][gkind == 2] = self.sum
        # sequence numbers: per group for collectives, per (group, src, dst) channel for p2p
        p2p = gkind == 3
        is_send = op == ids.get("send", -9)
        chan = np.where(p2p, np.where(is_send, 1000 + peer, 2000 + peer), gkind)
        seq = np.zeros(n, dtype=np.int64)
        for c in np.unique(chan[comm]):
            at = np.flatnonzero(chan == c)
            seq[at] = np.arange(len(at))
        cols["seq"] = seq
        cols["ts"] = np.arange(n) * 1e-4
        cols["_gkind"] = gkind
        cols["_peer"] = peer
        return cols


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--pp", type=int, default=16)
    ap.add_argument("--dp", type=int, default=128)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--microbatches", type=int, default=MICROBATCHES)
    ap.add_argument("--schedule", choices=["1f1b", "interleaved"], default="1f1b")
    ap.add_argument("--swap", type=int)
    ap.add_argument("--skip-send", type=int)
    ap.add_argument("--extra", type=int)
    a = ap.parse_args()
    generate(a.out, a.pp, a.dp, a.tp, a.events, a.schedule, a.microbatches, a.swap, a.skip_send, a.extra)


if __name__ == "__main__":
    main()
