"""Synthetic traces at scale, with seeded faults: an FSDP x TP training pattern on dp x tp ranks.

    python bench/synth.py -o big.trace --ranks 4096 --events 5000 [--skip 17] [--dtype 99] [--hang 17]

Per layer and step: an all-gather on the rank's dp group (FSDP unit), two all-reduces on its tp
group (attention, MLP), a reduce-scatter on dp. Faults: --skip R drops one tp all-reduce of rank R
(a missing_collective on R), --dtype R makes one all-gather of rank R float64 (dtype_mismatch).
Written directly as column blocks, so generating 82 M events takes seconds, not a recording.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from traceformat import format as fmt
from traceformat.writer import TraceWriter


def generate(
    path: str,
    ranks: int = 4096,
    events: int = 5000,
    tp: int = 8,
    skip: int | None = None,
    dtype_fault: int | None = None,
    hang: int | None = None,
    verbose: bool = True,
) -> None:
    """With `hang`, a post-mortem trace (like Flight Recorder dumps of a hung job): every stream
    ends where its rank was stuck: rank `hang` died just before its all-gather at 90 % of the run,
    the other members of its dp group entered that all-gather, everyone else finished it."""
    dp = ranks // tp
    header = fmt.make_header(
        world_size=ranks,
        ranks=list(range(ranks)),
        mode="post-mortem" if hang is not None else "fake",
        config={"program": f"synthetic fsdp x tp, {dp} x {tp}"},
        torch_version="synthetic",
    )
    w = TraceWriter(path, header)
    try:
        _write(w, ranks, events, tp, dp, skip, dtype_fault, hang, verbose)
    finally:
        w.close()


def _write(w: TraceWriter, ranks: int, events: int, tp: int, dp: int, skip, dtype_fault, hang, verbose) -> None:
    w.group(0, "0", list(range(ranks)), "default_pg")
    for t in range(dp):  # tp groups: consecutive ranks
        w.group(1 + t, str(1 + t), list(range(t * tp, (t + 1) * tp)), "mesh_tp")
    for d in range(tp):  # dp groups: strided ranks
        w.group(1 + dp + d, str(1 + dp + d), list(range(d, ranks, tp)), "mesh_dp")
    a = w.atom
    ops = np.array(
        [a("all_gather_into_tensor"), a("all_reduce"), a("all_reduce"), a("reduce_scatter_tensor")], dtype=np.int32
    )
    n_layers = 8
    frames = np.array([a(f"model.py:{40 + 10 * k} in forward") for k in range(4)], dtype=np.int32)
    modules = np.array([a(f"layers.{layer}") for layer in range(n_layers)], dtype=np.int32)
    f32, f64 = a("float32"), a("float64")
    shard, full, act = a(((1024,),)), a(((1024 * dp,),)), a(((4, 512),))
    sum_op, avg_op = a("sum"), a("avg")
    phases = np.array([a("forward"), a("forward"), a("backward"), a("backward")], dtype=np.int32)
    n = events
    pos = np.arange(n)
    kind = pos % 4  # 0 AG (dp), 1-2 AR (tp), 3 RS (dp)
    on_dp = (kind == 0) | (kind == 3)
    template = {name: np.full(n, 0 if dt == "u1" else -1, dtype=dt) for name, dt in fmt.COLUMNS}
    template["op"] = ops[kind]
    template["dtype"][:] = f32
    template["in_shapes"] = np.where(kind == 0, shard, np.where(kind == 3, full, act)).astype(np.int32)
    template["out_shapes"] = np.where(kind == 0, full, np.where(kind == 3, shard, act)).astype(np.int32)
    template["in_bytes"] = np.where(kind == 0, 4096, np.where(kind == 3, 4096 * dp, 8192)).astype(np.int64)
    template["out_bytes"] = np.where(kind == 0, 4096 * dp, np.where(kind == 3, 4096, 8192)).astype(np.int64)
    template["reduce_op"] = np.where(kind == 0, -1, np.where(kind == 3, avg_op, sum_op)).astype(np.int32)
    template["async_op"] = np.zeros(n, dtype=np.uint8)
    template["module"] = modules[(pos // 4) % n_layers]
    template["phase"] = phases[kind]
    template["frame"] = frames[kind]
    template["step"] = (pos // (4 * n_layers)).astype(np.int32)
    template["ts"] = pos * 1e-4
    # per-group sequence numbers: dp ops count among dp ops, tp among tp
    dp_seq = np.cumsum(on_dp) - 1
    tp_seq = np.cumsum(~on_dp) - 1
    template["seq"] = np.where(on_dp, dp_seq, tp_seq).astype(np.int64)
    stop = int(np.nonzero((kind == 0) & (pos >= int(0.9 * n)))[0][0]) if hang is not None else n
    progress_every = max(1, ranks // 8)
    start = time.perf_counter()
    for r in range(ranks):
        cols = dict(template)
        cols["group"] = np.where(on_dp, 1 + dp + r % tp, 1 + r // tp).astype(np.int32)
        if r == skip:  # drop the first tp all-reduce of the second step
            victim = int(np.nonzero((kind == 1) & (pos >= 4 * n_layers))[0][0])
            keep = np.ones(n, dtype=bool)
            keep[victim] = False
            cols = {k: v[keep] for k, v in cols.items()}
            tp_mask = cols["group"] == 1 + r // tp
            cols["seq"] = cols["seq"].copy()
            cols["seq"][tp_mask] = np.arange(tp_mask.sum())
        if r == dtype_fault:
            cols["dtype"] = cols["dtype"].copy()
            cols["dtype"][int(np.nonzero(kind == 0)[0][3])] = f64
        if hang is not None:
            end = stop if r == hang else stop + 1  # the dead rank never entered the all-gather
            cols = {k: v[:end] for k, v in cols.items()}
        w.block(r, cols)
        if hang is None:
            w.end(r, len(cols["op"]))
        if verbose and r % progress_every == 0 and r:
            print(f"  {r}/{ranks} ranks written ({time.perf_counter() - start:.1f} s)", flush=True)
    w.footer()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--ranks", type=int, default=4096)
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--skip", type=int)
    ap.add_argument("--dtype", type=int)
    ap.add_argument("--hang", type=int)
    a = ap.parse_args()
    generate(a.out, a.ranks, a.events, a.tp, a.skip, a.dtype, a.hang)


if __name__ == "__main__":
    main()
