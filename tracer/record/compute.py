"""Which compute a recording uses (`--compute` / `[tracer] compute`): real tensor math, or fake
(FakeTensorMode: shapes only; tracer/fake/compute.py). Both record the same comm
pattern (tests/record/test_compute_modes.py); they differ in cost and in what they can see.

"auto", the default, picks per job:
- real for a [job] script / entrypoint or --script: a program's math may read tensor values
  (loss.item() for logging, data-dependent control flow), which fake compute cannot give;
- real in local mode: LocalTensorMode is itself the compute;
- real for MoE models: routing decides how many tokens go to each expert, i.e. the expert
  parallel all_to_all split sizes, from the data;
- otherwise fake when the model's math is worth skipping: FakeTensorMode adds ~0.1 ms of
  Python dispatch per op, about 1 s per rank of the reference workload, which real math costs
  only from ~100 GFLOP per rank (TorchTitan's debug model: ~600 GFLOP per rank over 2 steps,
  9.2 s real vs 2.0 s fake here; the shipped examples: < 0.1 GFLOP, 0.35 s real vs 1.0 s fake).

Fake asked for where it cannot see everything is not refused: the ranks that read a tensor
value are recorded again with real compute (tracer/record/pipeline.py), with a note.
"""

from __future__ import annotations

COMPUTES = ("auto", "fake", "real")
FAKE_FROM_GFLOP = 100.0
"""Estimated GFLOP per rank (over the recorded steps) from which auto picks fake compute."""


def resolve(asked: str, mode: str, cfg=None) -> tuple[str, str]:
    """("fake" | "real", why) for `asked` in `mode` ("fake" | "local"); `cfg` is the JobConfig
    of the built-in workload (None for a script or entrypoint). ValueError on bad input."""
    if asked not in COMPUTES:
        raise ValueError(f"--compute must be one of {', '.join(COMPUTES)}, got {asked!r}")
    if asked == "fake" and mode != "fake":
        raise ValueError(f"--compute fake needs --mode fake ({mode} mode computes every rank's real values)")
    if asked != "auto":
        return asked, "asked for"
    if mode == "real":
        return "real", "real mode runs every rank on real gloo"
    if mode != "fake":
        return "real", "local mode computes with LocalTensor"
    if cfg is None or not cfg.builtin:
        return "real", "a program's own math may read tensor values"
    if cfg.model.n_experts:
        return "real", "MoE routing computes the all_to_all split sizes from the data"
    g = gflops_per_rank(cfg)
    if g < FAKE_FROM_GFLOP:
        return "real", f"the model's math is cheap (~{g:.2g} GFLOP per rank): fake dispatch would cost more"
    return "fake", f"skips ~{g:.0f} GFLOP of math per rank"


def gflops_per_rank(cfg) -> float:
    """Rough training FLOPs of one rank of the reference workload over the recorded steps:
    6 x parameters x tokens for the matmuls, 12 x layers x seq^2 x dim per sequence for
    attention, divided by tensor x pipeline parallel (data parallel ranks each do a full batch)."""
    m, t, p = cfg.model, cfg.training, cfg.parallelism
    per_block = (
        m.dim * (m.n_heads + 2 * m.kv_heads) * m.head_dim + m.n_heads * m.head_dim * m.dim + 3 * m.dim * m.hidden_dim
    )
    params = m.n_layers * per_block + 2 * m.vocab_size * m.dim
    tokens = t.local_batch_size * t.seq_len * cfg.steps
    attention = 12 * m.n_layers * t.local_batch_size * t.seq_len**2 * m.dim * cfg.steps
    return (6 * params * tokens + attention) / (p.tensor_parallel_degree * p.pipeline_parallel_degree) / 1e9
