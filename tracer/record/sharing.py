"""Share the recording between ranks that are identical up to relabelling: record one
representative per class and sampled verification ranks, derive every other rank's part by
relabelling the representative's (traceformat/relabel.py). Torch-free.

Why it is exact, and where. The built-in workload (tracer/workloads) in fake mode with fake
compute runs the same Python on every rank; a rank's identity enters it only through its
coordinates on the dense mesh (pp, dp_replicate, fsdp, tp), and every other mesh
(data-loading: pp, batch, cp, tp; loss_mesh = batch x cp; sparse: pp, dp_replicate, efsdp, ep
with ep = 1) is an unflattening of the same row-major world. Under FakeTensorMode no value is
computed, so nothing a rank does depends on its data (the per-dp-rank synthetic tokens are
never read). What is left that depends on the coordinates:

- which groups it communicates on: a translation of the non-pp coordinates, each modulo its
  size, maps every slice of every mesh dim (and of batch = dp_replicate x fsdp, of loss_mesh,
  of efsdp = fsdp x tp at ep = 1) onto a slice of the same dim, so the translated program
  issues the same ops on the image groups, in the same order, with the same per-group seq;
- shapes: the same on every rank exactly when everything the workload shards divides evenly:
  TP shards heads, KV heads, vocabulary, dim and the FFN hidden size (config/check.py refuses the
  first four uneven), sequence parallel the sequence (refused uneven), FSDP dim 0 of each
  parameter's TP-local shard over `fsdp` (torch pads the last chunks otherwise: the last ranks'
  reduce-scatter outputs and grad-norm shards differ), the pipeline the local batch into
  microbatches. `uneven` checks each from the config and sharing is off when one does not;
- the pipeline stage: the pp coordinate decides which layers a rank holds, so every pp stage is
  its own class, and the translation keeps it.

Not applied: user scripts and entrypoints, the TorchTitan adapter (its own code paths may read
the rank: set-up broadcasts from rank 0, logging on rank 0), real compute (values differ per
rank), local mode (one process anyway), MoE (routing reads data), expert parallel (ep splits
fsdp x tp differently: a translation does not map ep groups onto ep groups), and worlds below
MIN_WORLD (nothing to save).

Checked at run time, not assumed: besides the representative (coordinate 0 of every non-pp
dim), every class records its mesh corner (the last coordinate of every dim) and, when the
class has at least LARGE ranks and a core would otherwise sit idle while the others record, one
seeded-random rank (it then costs no wall time: all recorded ranks run in one round); each is
compared with its derived part
on every column but timestamps, group table included. A difference records that class's
ranks in full (with pipeline parallel, every class: stages exchange shapes at set-up).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from traceformat.format import TraceData
from traceformat.parts import part_path
from traceformat.reader import read_trace
from traceformat.relabel import RelabelError, difference, relabel
from traceformat.workers import cpu_count

UNEVEN = "shapes differ across ranks"
MIN_WORLD = 8
"""Sharing is on from this many ranks (below, recording every rank costs little)."""
LARGE = 16
"""A class of at least this many ranks is also verified on a seeded-random rank, when the cores
leave room for it (see plan)."""
DIMS = ("pp", "dp_replicate", "fsdp", "tp")
"""The dense mesh's dims, outermost first (tracer/workloads/mesh.py)."""


@dataclass(kw_only=True, slots=True)
class MeshShape:
    sizes: tuple[int, ...]
    """Size of each of DIMS; the world is their row-major product."""

    def coords(self, rank: int) -> tuple[int, ...]:
        out = []
        for s in reversed(self.sizes):
            out.append(rank % s)
            rank //= s
        return tuple(reversed(out))

    def rank(self, coords) -> int:
        r = 0
        for x, s in zip(coords, self.sizes):
            r = r * s + x
        return r

    @property
    def world(self) -> int:
        return int(np.prod(self.sizes))


def translation(shape: MeshShape, src: int, dst: int) -> np.ndarray:
    """The rank map (index old rank, value new) translating every non-pp coordinate by dst - src,
    modulo its size; pp is kept (src and dst must be on the same stage)."""
    cs, cd = shape.coords(src), shape.coords(dst)
    if cs[0] != cd[0]:
        raise ValueError(f"ranks {src} and {dst} are on different pipeline stages")
    grid = np.arange(shape.world).reshape(shape.sizes)
    for axis in range(1, len(shape.sizes)):
        grid = np.roll(grid, cd[axis] - cs[axis], axis=axis)
    out = np.empty(shape.world, dtype=np.int64)
    out[grid.ravel()] = np.arange(shape.world)
    return out


@dataclass(kw_only=True, slots=True)
class ShareClass:
    rep: int
    """The representative: coordinate 0 of every non-pp dim."""
    verify: list[int]
    """Recorded too and compared with their derived parts."""
    derive: list[int]
    """Asked-for ranks derived from rep when verification passes."""


@dataclass(kw_only=True, slots=True)
class SharePlan:
    shape: MeshShape
    classes: list[ShareClass] = field(default_factory=list)

    @property
    def recorded(self) -> list[int]:
        """Ranks recorded first: representatives, then verification ranks."""
        return [c.rep for c in self.classes] + [v for c in self.classes for v in c.verify]


def uneven(cfg) -> str:
    """'' when every dimension the workload shards divides evenly, else the first that does not."""
    m, p, t = cfg.model, cfg.parallelism, cfg.training
    tp, shard = p.tensor_parallel_degree, p.data_parallel_shard_degree
    if m.hidden_dim % tp:
        return f"the FFN hidden size {m.hidden_dim} over tensor_parallel_degree={tp}"
    hd = m.head_dim
    dim0 = {  # each parameter's dim 0 after tensor parallel (FSDP shards it over `fsdp`)
        "tok_embeddings / output (vocab / tp)": m.vocab_size // tp,
        "attention.wq (heads x head_dim / tp)": m.n_heads * hd // tp,
        "attention.wk / wv (kv heads x head_dim / tp)": m.kv_heads * hd // tp,
        "attention.wo, feed_forward.w2, norms (dim)": m.dim,
        "feed_forward.w1 / w3 (hidden / tp)": m.hidden_dim // tp,
    }
    if m.fuse_qkv:
        dim0["attention.wqkv ((heads + 2 kv heads) x head_dim / tp)"] = (m.n_heads + 2 * m.kv_heads) * hd // tp
    for what, size in dim0.items():
        if size % shard:
            return f"FSDP dim 0 of {what} = {size} over data_parallel_shard_degree={shard}"
    if p.pipeline_parallel_degree > 1 and t.local_batch_size % cfg.n_microbatches:
        return f"local_batch_size={t.local_batch_size} into {cfg.n_microbatches} microbatches"
    return ""


def plan(cfg, *, mode: str, compute: str, ranks: list[int], cores: int | None = None) -> tuple[SharePlan | None, str]:
    """(plan, '') where sharing applies to this recording, else (None, why not). `cores`: how many
    ranks record at once (default: this machine's cores); the seeded-random verification rank is
    added only when it fits in the same round as the representatives and corners, so that
    verifying more never makes the recording slower (2 cores, one class: rank 0 and its corner)."""
    p = cfg.parallelism
    if not cfg.builtin:
        return None, "a user program may depend on its rank"
    if mode != "fake" or compute != "fake":
        return None, "only fake compute in fake mode is rank-symmetric"
    if cfg.model.n_experts or p.expert_parallel_degree != 1 or p.context_parallel_degree != 1:
        return None, "MoE / expert or context parallel"
    if cfg.world_size < MIN_WORLD:
        return None, f"fewer than {MIN_WORLD} ranks"
    why = uneven(cfg)
    if why:
        return None, f"{UNEVEN}: {why} does not divide evenly (no sharing between ranks)"
    shape = MeshShape(
        sizes=(
            p.pipeline_parallel_degree,
            p.data_parallel_replicate_degree,
            p.data_parallel_shard_degree,
            p.tensor_parallel_degree,
        )
    )
    if shape.world != cfg.world_size:
        return None, "the mesh does not cover the world"
    inner = shape.world // shape.sizes[0]
    corner = shape.rank((0, *(s - 1 for s in shape.sizes[1:])))
    offsets = [corner] if corner else []
    stages = shape.sizes[0]
    room = (cores or cpu_count()) >= stages * (len(offsets) + 2)
    if inner >= LARGE and room:  # the same offset on every stage: a verifier's pipeline peers are verifiers too
        offsets.append(random.Random(cfg.world_size).choice([o for o in range(1, inner) if o != corner]))
    asked = set(ranks)
    share = SharePlan(shape=shape)
    for stage in range(shape.sizes[0]):
        rep = stage * inner
        verify = [rep + o for o in offsets]
        derive = sorted(r for r in asked if rep <= r < rep + inner and r != rep and r not in verify)
        share.classes.append(ShareClass(rep=rep, verify=verify, derive=derive))
    helpers_not_asked = len(set(share.recorded) - asked)
    if not offsets or sum(len(c.derive) for c in share.classes) <= helpers_not_asked:
        return None, "recording the asked-for ranks costs no more"
    return share, ""


def settle(share: SharePlan, parts_dir: str, clean: set[int]) -> tuple[dict[int, TraceData], list[int], list[str]]:
    """After the recorded ranks ran (`clean`: those that finished cleanly): verify every class.
    Returns (derived parts by rank, ranks to record in full, one note line each)."""
    everything = [r for c in share.classes for r in c.derive]
    unclean = [r for r in share.recorded if r not in clean]
    if unclean:
        return (
            {},
            everything,
            [
                f"rank sharing off: rank {unclean[0]} did not record cleanly; recording all {len(everything)} "
                f"other ranks in full"
            ],
        )
    notes: list[str] = []
    reps: dict[int, TraceData] = {}
    failed = []
    for c in share.classes:
        reps[c.rep] = rep = read_trace(part_path(parts_dir, c.rep))
        for v in c.verify:
            try:
                why = difference(
                    relabel(rep, c.rep, v, translation(share.shape, c.rep, v)),
                    v,
                    read_trace(part_path(parts_dir, v)),
                    v,
                )
            except RelabelError as e:
                why = str(e)
            if why:
                notes.append(
                    f"rank sharing: rank {v} is not rank {c.rep} relabelled ({why}); recording "
                    f"{'every' if share.shape.sizes[0] > 1 else 'its class of'} {c.rep}'s ranks in full"
                )
                failed.append(c)
                break
    if failed and share.shape.sizes[0] > 1:  # stages exchange shapes at set-up: a re-recorded rank needs its peers
        failed = list(share.classes)
    derived = {
        r: relabel(reps[c.rep], c.rep, r, translation(share.shape, c.rep, r))
        for c in share.classes
        if c not in failed
        for r in c.derive
    }
    ok = [c for c in share.classes if c not in failed]
    if ok:
        notes.append(
            f"recorded {len(share.recorded) + sum(len(c.derive) for c in failed)} of "
            f"{len(set(share.recorded) | set(everything))} ranks, derived {len(derived)} by relabelling "
            f"rank{'s' if len(ok) > 1 else ''} {', '.join(str(c.rep) for c in ok)} "
            f"(verified on {_ranks_words([v for c in ok for v in c.verify])})"
        )
    return derived, [r for c in failed for r in c.derive], notes


def header_entry(share: SharePlan, derived: dict[int, TraceData]) -> list[dict]:
    """The trace header's `derived`: per representative, the ranks derived from it and the ranks
    it was verified on (docs/trace-format.md)."""
    out = []
    for c in share.classes:
        ranks = [r for r in c.derive if r in derived]
        if ranks:
            out.append({"rep": c.rep, "ranks": ranks, "verified_on": list(c.verify)})
    return out


def _ranks_words(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(str(r) for r in ranks)}"
