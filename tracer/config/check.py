"""Semantic checks of a job config (tracer/config/parse.py reads it): fill the -1 shard degree and
the world size, and refuse degrees, shapes and schedules that cannot run, naming the key; refuse
what the chosen mode cannot simulate (check_mode)."""

from __future__ import annotations

from tracer.config.keys import did_you_mean
from tracer.config.pipeline_split import stage_modules
from tracer.config.quantize import FLOAT8_RECIPES, ROWWISE_RECIPES
from tracer.config.schema import SCHEDULES, STAGES_PER_RANK, JobConfig

AC_MODES = ("none", "selective", "full")
PRECISIONS = ("bfloat16", "float32")


def check(cfg: JobConfig) -> None:
    """Fill derived values (-1 shard degree, world size) and refuse what cannot run."""
    p, m, t = cfg.parallelism, cfg.model, cfg.training
    if cfg.comm.mode not in ("fake_backend", "local_tensor"):
        raise ValueError(f'comm.mode must be "fake_backend" or "local_tensor", got {cfg.comm.mode!r}')
    if cfg.job.script is not None and cfg.job.entrypoint is not None:
        raise ValueError("job: give job.script or job.entrypoint, not both")
    for key in (
        "data_parallel_replicate_degree",
        "tensor_parallel_degree",
        "pipeline_parallel_degree",
        "expert_parallel_degree",
    ):
        if getattr(p, key) < 1:
            raise ValueError(f"parallelism.{key} must be at least 1, got {getattr(p, key)}")
    if p.context_parallel_degree != 1:
        raise ValueError("parallelism.context_parallel_degree: context parallel is not modelled (use 1)")
    if p.data_parallel_shard_degree == 0 or p.data_parallel_shard_degree < -1:
        raise ValueError(
            f"parallelism.data_parallel_shard_degree must be -1 or at least 1, got {p.data_parallel_shard_degree}"
        )
    if p.fsdp_reshard_after_forward not in ("default", "always", "never", True, False):
        raise ValueError(
            f'parallelism.fsdp_reshard_after_forward must be "default", "always", "never" '
            f"or a bool, got {p.fsdp_reshard_after_forward!r}"
        )
    if cfg.tracer.compute not in ("auto", "fake", "real"):
        raise ValueError(f'tracer.compute must be "auto", "fake" or "real", got {cfg.tracer.compute!r}')
    if cfg.tracer.world_size < 0:
        raise ValueError(f"tracer.world_size must be at least 1, got {cfg.tracer.world_size}")
    if cfg.tracer.twin_of_dp < 0:
        raise ValueError(f"tracer.twin_of_dp must be at least 1 (0: not a twin), got {cfg.tracer.twin_of_dp}")
    if cfg.tracer.steps < 0:
        raise ValueError(f"tracer.steps must be at least 1, got {cfg.tracer.steps}")
    if not cfg.builtin:  # a user's program: the parallel degrees are its business
        if cfg.tracer.world_size == 0:
            raise ValueError("tracer.world_size is required to record a [job] script or entrypoint")
        return
    _check_degrees(cfg)
    if m.name != "llama3":
        raise ValueError(
            f"model.name: the built-in workload is llama3, got {m.name!r} (other TorchTitan models record "
            f"through TorchTitan itself: tracer record CONFIG.toml with TorchTitan installed)"
        )
    for key in ("dim", "n_layers", "n_heads", "vocab_size", "multiple_of"):
        if getattr(m, key) < 1:
            raise ValueError(f"model.{key} must be at least 1, got {getattr(m, key)}")
    for key in ("steps", "seq_len", "local_batch_size"):
        if getattr(t, key) < 1:
            raise ValueError(f"training.{key} must be at least 1, got {getattr(t, key)}")
    if m.dim % m.n_heads:
        raise ValueError(f"model.dim: {m.dim} is not divisible by model.n_heads={m.n_heads}")
    if m.n_heads % m.kv_heads:
        raise ValueError(f"model.n_kv_heads: {m.kv_heads} does not divide model.n_heads={m.n_heads}")
    if m.head_dim % 2:
        raise ValueError(f"model.dim: head dim {m.head_dim} must be even for rotary embeddings")
    tp = p.tensor_parallel_degree
    for key, value in (
        ("n_heads", m.n_heads),
        ("n_kv_heads", m.kv_heads),
        ("vocab_size", m.vocab_size),
        ("dim", m.dim),
    ):
        if value % tp:
            raise ValueError(f"model.{key}: {value} is not divisible by parallelism.tensor_parallel_degree={tp}")
    if p.enable_sequence_parallel and tp > 1 and t.seq_len % tp:
        raise ValueError(
            f"training.seq_len: {t.seq_len} is not divisible by parallelism.tensor_parallel_degree="
            f"{tp} (sequence parallel shards the sequence)"
        )
    _check_training_keys(cfg)
    _check_float8(cfg)
    _check_moe(cfg)
    _check_pipeline(cfg)


def _check_training_keys(cfg: JobConfig) -> None:
    """The keys that change dtypes, recompute and clipping: values the workload can honour."""
    t, ac = cfg.training, cfg.activation_checkpoint
    for key in ("mixed_precision_param", "mixed_precision_reduce"):
        if getattr(t, key) not in PRECISIONS:
            raise ValueError(f'training.{key} must be "bfloat16" or "float32", got {getattr(t, key)!r}')
    if t.max_norm <= 0:
        raise ValueError(f"training.max_norm must be positive (TorchTitan always clips), got {t.max_norm}")
    if ac.mode not in AC_MODES:
        raise ValueError(
            f"activation_checkpoint.mode must be one of {', '.join(AC_MODES)}, got {ac.mode!r}"
            f"{did_you_mean(ac.mode, AC_MODES)}"
        )
    if (
        ac.mode == "selective"
        and ac.selective_ac_option != "op"
        and not (ac.selective_ac_option.isdigit() and int(ac.selective_ac_option) >= 1)
    ):
        raise ValueError(
            f'activation_checkpoint.selective_ac_option must be "op" or a positive layer '
            f'frequency such as "2", got {ac.selective_ac_option!r}'
        )
    if cfg.metrics.log_freq < 1:
        raise ValueError(f"metrics.log_freq must be at least 1, got {cfg.metrics.log_freq}")


FLOAT8_CONVERTERS = ("float8", "quantize.linear.float8")
"""TorchTitan v0.2.2's Float8LinearConverter: registered as "quantize.linear.float8", spelled
"float8" by its own llama3_405b.toml and by parallelize_llama's float8-TP test."""


def _check_float8(cfg: JobConfig) -> None:
    """model.converters and [quantize.linear.float8]: torchao's float8 Linear (tensorwise and rowwise
    recipes) is modelled (tracer/workloads/float8.py), nothing else; async TP needs compile, as TorchTitan says."""
    p, m, f8 = cfg.parallelism, cfg.model, cfg.quantize.linear.float8
    for name in m.converters:
        if name not in FLOAT8_CONVERTERS:
            raise ValueError(
                f'model.converters: {name!r} is not modelled by the built-in workload (only "float8": '
                f"torchao's Float8Linear); record TorchTitan itself instead"
            )
    if p.enable_async_tensor_parallel and not (cfg.compile.enable and "model" in cfg.compile.components):
        raise ValueError(
            'parallelism.enable_async_tensor_parallel needs compile.enable = true with "model" in '
            "compile.components (TorchTitan: Async TP requires 'model' in --compile.components and --compile.enable)"
        )
    if not m.converters:
        return
    if f8.recipe_name is not None and f8.recipe_name not in FLOAT8_RECIPES:
        raise ValueError(
            f"quantize.linear.float8.recipe_name must be one of {', '.join(FLOAT8_RECIPES)} (torchao's "
            f"Float8LinearRecipeName), got {f8.recipe_name!r}{did_you_mean(f8.recipe_name, FLOAT8_RECIPES)}"
        )
    if f8.recipe_name is not None and f8.enable_fsdp_float8_all_gather:  # TorchTitan v0.2.2 asserts; torchao too
        raise ValueError(
            f"quantize.linear.float8.enable_fsdp_float8_all_gather cannot be set with recipe_name = {f8.recipe_name!r} "
            "(TorchTitan asserts: not supported together; torchao's float8 all-gather needs tensorwise scaling)"
        )
    import importlib.util

    if importlib.util.find_spec("torchao") is None:
        raise ValueError(
            'model.converters = ["float8"] needs torchao (its Float8Linear is what communicates): '
            "pip install -c constraints-cpu.txt 'commtrace[float8]' after torch==2.13.0"
        )
    rowwise = f8.recipe_name in ROWWISE_RECIPES  # plain TP styles: a high-precision Linear is fine
    if p.tensor_parallel_degree > 1 and "float8" in m.converters and not rowwise:  # Float8ColwiseParallel refuses
        shapes = {
            "attention.wq": (m.n_heads * m.head_dim, m.dim),
            "attention.wk": (m.kv_heads * m.head_dim, m.dim),
            "attention.wo": (m.dim, m.dim),
        }
        if not m.n_experts:
            shapes |= {"feed_forward.w1": (m.hidden_dim, m.dim), "feed_forward.w2": (m.dim, m.hidden_dim)}
        fqns = [f"layers.{i}.{name}" for i in range(m.n_layers) for name in shapes]
        for fqn in fqns:
            shape = shapes[fqn.split(".", 2)[2]]
            if shape[0] % 16 or shape[1] % 16 or any(f in fqn for f in f8.filter_fqns):
                raise ValueError(
                    f"model.converters: float8 tensor parallel needs every block Linear in float8, but {fqn} "
                    f"{list(shape)} stays high precision (a dim not divisible by 16, or in filter_fqns): "
                    f"TorchTitan's Float8ColwiseParallel refuses it"
                )


def check_mode(cfg: JobConfig, mode: str) -> None:
    """Refuse, before anything runs, what the chosen mode cannot simulate."""
    if mode == "local" and cfg.builtin and cfg.parallelism.pipeline_parallel_degree > 1:
        raise ValueError(
            "comm.mode: pipeline parallel needs p2p send/recv, which local_tensor mode cannot "
            "simulate (LocalTensor runs all ranks in lockstep): record with --mode real (real values) or "
            "fake_backend (--mode fake: the comm pattern)"
        )
    if mode == "local" and cfg.builtin and cfg.model.converters:
        raise ValueError(
            "comm.mode: float8 (torchao's Float8 tensor subclasses) cannot run under LocalTensorMode: "
            "record with --mode real (real values) or fake_backend (--mode fake: the comm pattern)"
        )


def notes(cfg: JobConfig) -> list[str]:
    """One line each on what the recording does with keys it honours in a way worth saying."""
    out = []
    if cfg.builtin and cfg.parallelism.enable_async_tensor_parallel and cfg.parallelism.tensor_parallel_degree > 1:
        out.append(
            "async TP: TorchTitan v0.2.2 sets inductor's _micro_pipeline_tp but never enables symmetric memory "
            "for the tp group, and torch's pass fuses an all-gather / reduce-scatter with its matmul only on a "
            "group that has it (is_symm_mem_enabled_for_group): the tp collectives stay NCCL collectives, "
            "recorded as such"
        )
    return out


def _check_degrees(cfg: JobConfig) -> None:
    p = cfg.parallelism
    others = p.data_parallel_replicate_degree * p.tensor_parallel_degree * p.pipeline_parallel_degree
    world = cfg.tracer.world_size
    if p.data_parallel_shard_degree == -1:
        if world == 0:  # TorchTitan takes it from the launcher; silently using 1 rank would mislead
            raise ValueError(
                f"parallelism.data_parallel_shard_degree = -1 takes the ranks the other degrees "
                f"(product {others}) leave, so the world size is needed: give -n N (or [tracer] world_size)"
            )
        if world % others:
            raise ValueError(
                f"parallelism.data_parallel_shard_degree=-1 cannot fill tracer.world_size={world}: "
                f"the other degrees multiply to {others}, which does not divide it"
            )
        else:
            p.data_parallel_shard_degree = world // others
    product = others * p.data_parallel_shard_degree
    if world == 0:
        cfg.tracer.world_size = product
    elif product != world:
        raise ValueError(
            f"parallelism: degrees multiply to {product} (dp_replicate {p.data_parallel_replicate_degree}"
            f" x dp_shard {p.data_parallel_shard_degree} x tp {p.tensor_parallel_degree} x pp "
            f"{p.pipeline_parallel_degree}), but tracer.world_size is {world}"
        )


def _check_moe(cfg: JobConfig) -> None:
    p, m = cfg.parallelism, cfg.model
    ep = p.expert_parallel_degree
    if m.n_experts < 0 or (m.n_experts and not 1 <= m.top_k <= m.n_experts):
        raise ValueError(f"model.top_k: must be between 1 and model.n_experts={m.n_experts}, got {m.top_k}")
    if ep == 1:
        return
    if m.n_experts == 0:
        raise ValueError("parallelism.expert_parallel_degree > 1 needs an MoE model: set model.n_experts")
    if p.data_parallel_shard_degree % ep:
        raise ValueError(
            f"parallelism.expert_parallel_degree: {ep} must divide data_parallel_shard_degree="
            f"{p.data_parallel_shard_degree} (experts are sharded over part of dp_shard, as "
            f"TorchTitan's dp2ep does)"
        )
    if m.n_experts % ep:
        raise ValueError(f"model.n_experts: {m.n_experts} is not divisible by parallelism.expert_parallel_degree={ep}")
    if p.tensor_parallel_degree > 1:
        raise ValueError(
            "parallelism.expert_parallel_degree: expert parallel together with tensor parallel is "
            "not modelled (use tensor_parallel_degree = 1)"
        )


def _check_pipeline(cfg: JobConfig) -> None:
    p, m, t = cfg.parallelism, cfg.model, cfg.training
    if p.pipeline_parallel_schedule not in SCHEDULES:
        raise ValueError(
            f"parallelism.pipeline_parallel_schedule must be one of {', '.join(SCHEDULES)}, got "
            f"{p.pipeline_parallel_schedule!r}{did_you_mean(p.pipeline_parallel_schedule, SCHEDULES)}"
        )
    if p.microbatches is not None and p.pipeline_parallel_microbatch_size is not None:
        raise ValueError("parallelism.microbatches: give it or pipeline_parallel_microbatch_size, not both")
    if p.pipeline_parallel_degree == 1:
        return
    if p.pipeline_parallel_microbatch_size is not None and (
        p.pipeline_parallel_microbatch_size < 1 or t.local_batch_size % p.pipeline_parallel_microbatch_size
    ):
        raise ValueError(
            f"parallelism.pipeline_parallel_microbatch_size: {p.pipeline_parallel_microbatch_size} "
            f"does not divide training.local_batch_size={t.local_batch_size}"
        )
    n_mb, stages = cfg.n_microbatches, cfg.n_stages
    if n_mb < 1 or t.local_batch_size % n_mb:
        raise ValueError(
            f"parallelism.microbatches: {n_mb} microbatches do not split training.local_batch_size={t.local_batch_size}"
        )
    for key in ("pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers"):
        if getattr(p, key) < 0:
            raise ValueError(f"parallelism.{key} must be at least 0, got {getattr(p, key)}")
    try:
        stage_modules(
            stages, m.n_layers, p.pipeline_parallel_first_stage_less_layers, p.pipeline_parallel_last_stage_less_layers
        )
    except ValueError as e:
        raise ValueError(
            f"parallelism.pipeline_parallel_schedule: {p.pipeline_parallel_schedule} needs {stages} "
            f"stages ({p.pipeline_parallel_degree} ranks x {STAGES_PER_RANK[p.pipeline_parallel_schedule]}"
            f"): {e}"
        ) from None
    if p.pipeline_parallel_schedule == "1F1B" and n_mb < p.pipeline_parallel_degree:
        raise ValueError(
            f"parallelism.microbatches: 1F1B needs at least pipeline_parallel_degree="
            f"{p.pipeline_parallel_degree} microbatches, got {n_mb}"
        )
    if p.pipeline_parallel_schedule == "Interleaved1F1B":
        rounds = max(1, n_mb // p.pipeline_parallel_degree)
        if n_mb % rounds:
            raise ValueError(
                f"parallelism.microbatches: Interleaved1F1B needs a multiple of {rounds} microbatches, got {n_mb}"
            )
