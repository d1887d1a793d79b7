"""The job config of `tracer record CONFIG.toml`: its sections as typed dataclasses, TorchTitan
v0.2.2's key names (tracer/config/parse.py reads a TOML into them, tracer/config/check.py checks
the values). Sections commtrace uses are typed below; what it accepts and ignores, or refuses, of
TorchTitan's other keys is tracer/config/keys.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tracer.config.keys import DRY_RUN_STEPS
from tracer.config.quantize import Compile, Quantize

SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B")
STAGES_PER_RANK = {"GPipe": 1, "1F1B": 1, "Interleaved1F1B": 2}
"""Looped schedules hold several stages per rank; TorchTitan's default for Interleaved1F1B is 2."""


@dataclass(kw_only=True, slots=True)
class Job:
    script: str | None = None
    """Record this Python file (run as `python FILE.py ARGS`) instead of the built-in workload."""
    entrypoint: str | None = None
    """Record `package.module:function` instead of the built-in workload."""
    args: list[str] = field(default_factory=list)
    """Arguments passed to the script or entrypoint."""


@dataclass(kw_only=True, slots=True)
class Model:
    name: str = "llama3"
    """Model family: "llama3" is built in; other TorchTitan models record through the TorchTitan
    adapter (tracer/adapters/torchtitan/request.py) when TorchTitan is installed."""
    flavor: str | None = None
    """TorchTitan's flavor ("debugmodel", "8B", "70B", "405B"; tracer/config/flavors.py): sets every
    dimension below as TorchTitan does; keys given next to it override it. None: the keys as given."""
    dim: int = 64
    """Hidden size."""
    n_layers: int = 2
    """Number of transformer blocks."""
    n_heads: int = 4
    """Attention heads."""
    n_kv_heads: int | None = None
    """Key/value heads (grouped-query attention); None means n_heads."""
    vocab_size: int = 128
    """Vocabulary size."""
    multiple_of: int = 32
    """The SwiGLU hidden size is rounded up to a multiple of this."""
    ffn_dim_multiplier: float | None = None
    """Optional multiplier of the SwiGLU hidden size."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    rope_theta: float = 10000.0
    """Rotary embedding base."""
    n_experts: int = 0
    """Experts of the MoE feed-forward in every block; 0 means a dense SwiGLU."""
    top_k: int = 1
    """Experts each token is routed to."""
    converters: list[str] = field(default_factory=list)
    """TorchTitan's model converters: "float8" swaps nn.Linear for torchao's Float8Linear with float8
    tensor parallel; "quantize.linear.float8" (v0.2.2's registry name) the same with plain TP styles
    ([quantize.linear.float8], tracer/workloads/float8.py, docs/float8.md); nothing else is modelled."""
    fuse_qkv: bool = False
    """One wqkv projection instead of wq, wk, wv (TorchTitan 0.3's llama3 models): fewer
    parameters to norm and fewer backward reduce-scatter sources, same collectives otherwise."""

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def hidden_dim(self) -> int:
        """SwiGLU hidden size, computed as Llama / TorchTitan do."""
        hidden = int(2 * (4 * self.dim) / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return self.multiple_of * ((hidden + self.multiple_of - 1) // self.multiple_of)


@dataclass(kw_only=True, slots=True)
class Optimizer:
    name: str = "AdamW"
    """Optimizer (AdamW only: its state never communicates, the choice cannot change a pattern)."""
    lr: float = 8e-4
    """Learning rate."""


@dataclass(kw_only=True, slots=True)
class Training:
    steps: int = 2
    """Steps of the training job (TorchTitan's length of a real run). A recording takes only the
    first few of them: see TracerSection.steps."""
    seq_len: int = 16
    """Sequence length."""
    local_batch_size: int = 4
    """Batch size per data-parallel rank."""
    mixed_precision_param: str = "bfloat16"
    """FSDP's param_dtype: parameters (so activations and tp collectives) in "bfloat16" or "float32"."""
    mixed_precision_reduce: str = "float32"
    """FSDP's reduce_dtype: gradients reduce-scattered / all-reduced in "float32" or "bfloat16"."""
    max_norm: float = 1.0
    """Gradient-norm clipping every step (TorchTitan always clips): the norm's all-reduces."""


@dataclass(kw_only=True, slots=True)
class Parallelism:
    data_parallel_replicate_degree: int = 1
    """Replicas (HSDP replicate dim, or DDP-like when the shard degree is 1)."""
    data_parallel_shard_degree: int = -1
    """FSDP shard degree; -1 takes the ranks the other degrees leave."""
    fsdp_reshard_after_forward: str | bool = "default"
    """"default" (reshard unless pipelining), "always", "never", or a bool."""
    tensor_parallel_degree: int = 1
    """Tensor parallel degree."""
    enable_sequence_parallel: bool = True
    """Shard norms and residuals along the sequence between TP regions (TorchTitan always does)."""
    pipeline_parallel_degree: int = 1
    """Pipeline ranks (physical); looped schedules hold several stages per rank."""
    pipeline_parallel_schedule: str = "1F1B"
    """GPipe, 1F1B or Interleaved1F1B."""
    pipeline_parallel_first_stage_less_layers: int = 1
    """The first stage counts tok_embeddings as this many layers when splitting (TorchTitan)."""
    pipeline_parallel_last_stage_less_layers: int = 1
    """The last stage counts norm + output as this many layers when splitting (TorchTitan)."""
    disable_loss_parallel: bool = False
    """With tensor parallel, gather the full logits for the loss instead of keeping them vocab-sharded."""
    pipeline_parallel_microbatch_size: int | None = None
    """TorchTitan's knob: microbatches = local_batch_size / this."""
    microbatches: int | None = None
    """Number of microbatches (alternative to pipeline_parallel_microbatch_size); default: pp stages."""
    expert_parallel_degree: int = 1
    """Expert parallel degree (TorchTitan's dp2ep: experts sharded over part of the dp_shard dim)."""
    context_parallel_degree: int = 1
    """Context parallel degree (not modelled: must be 1)."""
    enable_async_tensor_parallel: bool = False
    """Async TP (needs compile.enable with "model", as TorchTitan): v0.2.2 only sets inductor's
    _micro_pipeline_tp, which fuses nothing on a tp group without symmetric memory: the tp
    collectives are recorded unchanged, with a note (config/check.notes, docs/float8.md)."""


@dataclass(kw_only=True, slots=True)
class ActivationCheckpoint:
    mode: str = "selective"
    """"none", "selective" or "full": which forward ops backward recomputes, collectives included."""
    selective_ac_option: str = "op"
    """Selective AC: "op" (TorchTitan's op-level policy) or N (full recompute of every N-th block)."""


@dataclass(kw_only=True, slots=True)
class Metrics:
    log_freq: int = 10
    """Steps 1 and every log_freq-th step log the loss: three all-reduces over the data-parallel ranks."""


@dataclass(kw_only=True, slots=True)
class Comm:
    mode: str = "fake_backend"
    """How ranks are simulated: "fake_backend" (a process per rank) or "local_tensor" (one process)."""


@dataclass(kw_only=True, slots=True)
class TracerSection:
    world_size: int = 0
    """Simulated ranks; 0 means the product of the parallel degrees (which a -1 degree cannot give:
    then -n / world_size is required)."""
    steps: int = 0
    """Optimizer steps to record; 0 means min(training.steps, DRY_RUN_STEPS): a dry run needs only
    the first step (warm-up: lazy inits, FSDP's first all-gathers) and one steady-state step."""
    ranks: str | list[int] = "all"
    """Ranks to record: "all", "0,3,8-15" or a list."""
    output: str | None = None
    """Trace file to write (default: CONFIG.trace next to where tracer runs)."""
    compute: str = "auto"
    """Tensor math: "real", "fake" (FakeTensorMode, shapes only; ranks that read a tensor value
    are re-recorded with real compute) or "auto" (see tracer/record/compute.py)."""
    numerics: bool = False
    """Record numerics digests per step (local mode only; `analyzer numerics`)."""
    twin_of_dp: int = 0
    """This run is the 1-rank numerics twin of a config with this data-parallel degree: its one
    batch is those dp ranks' batches together (0: a run of its own; `analyzer numerics --ref`)."""


@dataclass(kw_only=True, slots=True)
class JobConfig:
    job: Job = field(default_factory=Job)
    model: Model = field(default_factory=Model)
    optimizer: Optimizer = field(default_factory=Optimizer)
    training: Training = field(default_factory=Training)
    parallelism: Parallelism = field(default_factory=Parallelism)
    activation_checkpoint: ActivationCheckpoint = field(default_factory=ActivationCheckpoint)
    metrics: Metrics = field(default_factory=Metrics)
    comm: Comm = field(default_factory=Comm)
    compile: Compile = field(default_factory=Compile)
    quantize: Quantize = field(default_factory=Quantize)
    tracer: TracerSection = field(default_factory=TracerSection)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # ---- derived values (valid after check()) ----------------------------------------------
    @property
    def world_size(self) -> int:
        return self.tracer.world_size

    @property
    def steps(self) -> int:
        """Steps the recording runs: tracer.steps, or by default min(training.steps, DRY_RUN_STEPS)."""
        return self.tracer.steps or min(self.training.steps, DRY_RUN_STEPS)

    def steps_why(self) -> str:
        """One line saying how many steps are recorded and why."""
        t = self.training.steps
        if self.tracer.steps:
            return f"recording {self.steps} steps (asked for; the job's training.steps is {t})"
        if self.steps < t:
            return (
                f"recording {self.steps} of training.steps={t} steps: a dry run needs only the first "
                f"(warm-up) and a steady-state step; --steps N / [tracer] steps to change it"
            )
        return f"recording all {self.steps} steps of training.steps={t}"

    @property
    def builtin(self) -> bool:
        """True when the built-in workload runs (no [job] script / entrypoint)."""
        return self.job.script is None and self.job.entrypoint is None

    @property
    def n_microbatches(self) -> int:
        p = self.parallelism
        if p.microbatches is not None:
            return p.microbatches
        if p.pipeline_parallel_microbatch_size is not None:
            return self.training.local_batch_size // p.pipeline_parallel_microbatch_size
        return p.pipeline_parallel_degree * STAGES_PER_RANK.get(p.pipeline_parallel_schedule, 1)

    @property
    def n_stages(self) -> int:
        p = self.parallelism
        return p.pipeline_parallel_degree * STAGES_PER_RANK[p.pipeline_parallel_schedule]


def ranks_spec(cfg: JobConfig) -> str:
    r = cfg.tracer.ranks
    return r if isinstance(r, str) else ",".join(str(x) for x in r)


WORKLOAD = "tracer.workloads.train:main"


def program(cfg: JobConfig):
    """What `tracer record CONFIG.toml` runs: the [job] script / entrypoint, or the built-in
    workload, which gets the checked config as JSON (no re-reading the TOML on every rank)."""
    import json

    from tracer.program import Program

    if cfg.job.script is not None:
        return Program(script=cfg.job.script, args=list(cfg.job.args))
    if cfg.job.entrypoint is not None:
        return Program(entrypoint=cfg.job.entrypoint, args=list(cfg.job.args))
    return Program(entrypoint=WORKLOAD, args=["--config-json", json.dumps(cfg.to_dict(), separators=(",", ":"))])
