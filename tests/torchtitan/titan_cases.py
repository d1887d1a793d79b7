"""TorchTitan 0.3's own integration tests, transcribed: `tests/integration_tests/{features,models,
h100}.py` of TorchTitan's release/0.3 branch (name, override variants, ngpu, disabled), each
variant as TorchTitan's runner passes it to `run_train.sh` (strings joined by spaces and split by
the shell). `with_typechecking` adds what TorchTitan's build functions add to eligible variants
(`--debug.spmd_typechecking` before, `activation-checkpoint:none` after). `bench/titan_matrix.py`
records each one through `tracer record --torchtitan`; `test_torchtitan_matrix.py` runs a few.
Data only: no test here.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

DCG = "--training.disable_cuda_graphs"
PP = "--parallelism.pipeline_parallel_degree"
DP = "--parallelism.data_parallel_shard_degree"
REP = "--parallelism.data_parallel_replicate_degree"
TP = "--parallelism.tensor_parallel_degree"
CP = "--parallelism.context_parallel_degree"
EP = "--parallelism.expert_parallel_degree"
SCHED = "--parallelism.pipeline_parallel_schedule"


@dataclass(frozen=True, slots=True)
class Case:
    suite: str
    """features, models or h100 (TorchTitan's --test_suite)."""
    name: str
    """TorchTitan's test_name."""
    variants: tuple[tuple[str, ...], ...]
    """Each run's overrides, in TorchTitan's spelling (one string may hold several tokens)."""
    ngpu: int = 4
    """World size (TorchTitan's default 4)."""
    disabled: str = ""
    """Why TorchTitan itself disables the test ("" when it runs in TorchTitan's CI)."""
    typecheck: bool = True
    """Whether TorchTitan's build function may add spmd typechecking (h100 does not)."""
    module: str = "llama3"
    config: str = "llama3_debugmodel"
    extra: dict = field(default_factory=dict)


def _v(*args: str) -> tuple[str, ...]:
    return tuple(args)


FEATURES = [
    Case("features", "default", (_v("--profiler.enable_profiling", "--metrics.enable_tensorboard"),)),
    Case("features", "1d_compile", (_v("--compile.enable"),)),
    Case("features", "1d_compile_sac_op", (_v("--compile.enable", "activation-checkpoint:selective"),)),
    Case(
        "features",
        "2d_eager",
        (
            _v(f"{TP} 2"),
            _v("--module llama3 --config llama3_debugmodel_ce_loss", f"{TP} 2"),
        ),
    ),
    Case("features", "2d_eager_no_sp", (_v(f"{TP} 2", "--parallelism.no-enable-sequence-parallel"),)),
    Case("features", "2d_compile", (_v("--compile.enable", f"{TP} 2"),)),
    Case(
        "features",
        "2d_asynctp_compile",
        (_v("--compile.enable", f"{TP} 2", "--compile.enable_async_tensor_parallel"),),
        disabled="TODO: re-enable this test once the async TP CI issue is fixed",
    ),
    Case("features", "full_checkpoint", (_v("--checkpoint.enable"), _v("--checkpoint.enable", "--training.steps 20"))),
    Case(
        "features",
        "model_only_hf_checkpoint",
        (
            _v(
                "--checkpoint.enable",
                "--checkpoint.folder hf_checkpoint",
                "--checkpoint.last_save_model_only",
                "--checkpoint.last_save_in_hf",
            ),
            _v(
                "--checkpoint.enable",
                "--checkpoint.initial_load_path {dump}/hf_checkpoint/step-2/",  # TorchTitan: step-10 of 10; here 2 of 2
                "--checkpoint.initial_load_model_only",
                "--checkpoint.initial_load_in_hf",
            ),
        ),
    ),
    Case(
        "features",
        "last_save_model_only_bf16",
        (_v("--checkpoint.enable", "--checkpoint.last_save_model_only", "--checkpoint.export_dtype bfloat16"),),
    ),
    Case("features", "pp_1f1b", (_v(DCG, f"{PP} 2", f"{SCHED} 1F1B", f"{DP} 1"),), ngpu=2),
    Case(
        "features",
        "pp_dp_1f1b",
        (
            _v(DCG, f"{PP} 2", f"{SCHED} 1F1B", f"{DP} 2"),
            _v(DCG, f"{PP} 2", f"{SCHED} 1F1B", "--parallelism.pipeline_parallel_layers_per_stage 4", f"{DP} 2"),
        ),
    ),
    Case("features", "pp_tp_gpipe", (_v(DCG, f"{PP} 2", f"{SCHED} GPipe", f"{TP} 2"),)),
    Case(
        "features",
        "pp_dp_tp",
        (
            _v(DCG, "--checkpoint.enable", f"{PP} 2", f"{DP} 2", f"{TP} 2"),
            _v(DCG, "--training.steps 20", "--checkpoint.enable", f"{PP} 2", f"{DP} 2", f"{TP} 2"),
        ),
        ngpu=8,
    ),
    Case("features", "3d_compile", (_v(DCG, f"{PP} 2", f"{DP} 2", f"{TP} 2", "--compile.enable"),), ngpu=8),
    Case(
        "features",
        "pp_looped_1f1b",
        (
            _v(DCG, f"{PP} 4", f"{SCHED} Interleaved1F1B"),
            _v(DCG, f"{PP} 4", f"{SCHED} Interleaved1F1B", "--parallelism.pipeline_parallel_layers_per_stage 1"),
        ),
    ),
    Case(
        "features",
        "pp_looped_zero_bubble",
        (_v(DCG, f"{PP} 4", f"{SCHED} InterleavedZeroBubble", "activation-checkpoint:full"),),
        disabled="stage_backward_input fails on the forwarded FlexAttention BlockMask",
    ),
    Case(
        "features",
        "pp_zbv",
        (_v(DCG, f"{PP} 2", f"{SCHED} ZBVZeroBubble", "activation-checkpoint:full"),),
        ngpu=2,
        disabled="stage_backward_input fails on the forwarded FlexAttention BlockMask",
    ),
    Case(
        "features",
        "pp_custom_csv",
        (
            _v(
                DCG,
                f"{PP} 2",
                f"{SCHED} PipelineScheduleMulti",
                "--parallelism.pipeline_parallel_schedule_csv ./tests/assets/custom_schedule.csv",
                "activation-checkpoint:full",
            ),
        ),
        ngpu=2,
        disabled="split backward: stage_backward_input fails on the forwarded FlexAttention BlockMask",
    ),
    Case("features", "optimizer_bf16_states", (_v("--optimizer.implementation fused_opt_states_bf16"),), ngpu=2),
    Case("features", "ddp", (_v(f"{DP}=1", f"{REP}=4"),)),
    Case("features", "hsdp", (_v(f"{DP}=2", f"{REP}=2"),)),
    Case("features", "cp", (_v(f"{CP}=4"),)),
    Case("features", "hsdp+tp", (_v(f"{DP}=2", f"{REP}=2", f"{TP}=2"),), ngpu=8),
    Case("features", "fsdp+cp", (_v("--module torchtitan_recipes.tests --config llama3_debugmodel_fsdp2_cp2"),)),
    Case("features", "hsdp+cp_without_dp_shard", (_v(f"{DP}=1", f"{REP}=2", f"{CP}=2"),)),
    Case("features", "hsdp+cp_with_dp_shard", (_v(f"{DP}=2", f"{REP}=2", f"{CP}=2"),), ngpu=8),
    Case("features", "fsdp+tp+cp", (_v(f"{DP}=2", f"{TP}=2", f"{CP}=2"),), ngpu=8),
    Case("features", "fsdp_reshard_always", (_v("--parallelism.fsdp_reshard_after_forward always"),), ngpu=2),
    Case(
        "features",
        "optional_checkpoint",
        (
            _v("--checkpoint.enable", "--training.steps 10"),
            _v(
                "--checkpoint.enable",
                "--checkpoint.exclude_from_loading lr_scheduler,dataloader,optimizer",
                f"{TP} 2",
                "--training.steps 20",
            ),
        ),
    ),
    Case(
        "features",
        "gradient_accumulation",
        (_v("--training.local_batch_size 8", "--training.global_batch_size 32"),),
        ngpu=2,
    ),
    Case(
        "features",
        "validation_tp_cp_pp",
        (
            _v(
                DCG,
                "--validator.enable",
                "--validator.dataloader.dataset c4_test",
                f"{TP}=2",
                f"{CP}=2",
                f"{PP}=2",
                f"{SCHED} Interleaved1F1B",
            ),
        ),
        ngpu=8,
    ),
    Case(
        "features",
        "override_fused_swiglu",
        (_v("--override.imports torchtitan.overrides.fused_swiglu.fused_swiglu", f"{TP} 2"),),
    ),
    Case(
        "features",
        "override_fused_grouped_experts",
        (
            _v(
                DCG,
                "--module deepseek_v3 --config deepseek_v3_debugmodel",
                "--override.imports torchtitan.overrides.fused_swiglu.fused_swiglu,"
                "torchtitan.overrides.fused_swiglu.fused_grouped_experts",
                f"{TP} 2",
                f"{EP} 4",
            ),
        ),
    ),
    Case(
        "features",
        "fsdp+varlen_attn+per_op_sac",
        (
            _v(
                DCG,
                "--module llama3 --config llama3_debugmodel_varlen_attn",
                f"{DP}=4",
                "activation-checkpoint:selective",
            ),
        ),
    ),
    Case(
        "features",
        "float8_emulate_lora",
        (_v(DCG, "--module llama3 --config llama3_debugmodel_float8_emulate_lora", f"{TP} 2", f"{PP} 2"),),
        ngpu=8,
    ),
    Case(
        "features",
        "torchcomms_3d_dp+cp+pp+compile",
        (_v(DCG, "--comm.mode torchcomms", f"{CP} 2", f"{PP} 2", "--compile.enable"),),
        ngpu=8,
        disabled="new_group cannot delegate to split_group with use_local_synchronization=True",
    ),
    Case(
        "features",
        "torchcomms_3d_dp+tp+pp+compile",
        (
            _v(
                DCG,
                "--module llama3 --config llama3_debugmodel_ce_loss",
                "--comm.mode torchcomms",
                f"{TP} 2",
                f"{PP} 2",
                "--compile.enable",
            ),
        ),
        ngpu=8,
        disabled="torchcomms-managed TP PG not registered in c10d; resolve fails under compile",
    ),
    Case("features", "sft", (_v("--module llama3 --config sft_debugmodel"),), ngpu=2),
    Case(
        "features", "seed_checkpoint", (_v(DCG, "--checkpoint.enable", "--checkpoint.create_seed_checkpoint"),), ngpu=1
    ),
]

MODELS = [
    Case(
        "models",
        "deepseek_v3_mtp_fsdp+ep+compile",
        (
            _v(
                DCG,
                "--module deepseek_v3 --config deepseek_v3_debugmodel_mtp",
                f"{DP} 4",
                f"{EP} 2",
                "--compile.enable",
                "--override.imports torchtitan.overrides.helion_rope.helion_cos_sin_rope,"
                "torchtitan.overrides.helion_rope.helion_complex_rope",
            ),
        ),
    ),
    Case(
        "models",
        "deepseek_v3_pp+fsdp+tp+ep",
        (
            _v(
                DCG,
                "--module deepseek_v3 --config deepseek_v3_debugmodel",
                f"{PP} 2",
                f"{SCHED} Interleaved1F1B",
                f"{DP} 2",
                f"{TP} 2",
                f"{EP} 4",
            ),
        ),
        ngpu=8,
    ),
    Case(
        "models",
        "deepseek_v3_hsdp+ep",
        (_v(DCG, "--module deepseek_v3 --config deepseek_v3_debugmodel", f"{REP} 2", f"{DP} 2", f"{EP} 2"),),
    ),
    Case(
        "models",
        "deepseek_v3_fused_mla_swiglu_fsdp+ep",
        (
            _v(
                DCG,
                "--module deepseek_v3 --config deepseek_v3_debugmodel",
                "--override.imports torchtitan.overrides.fused_mla.fused_mla,"
                "torchtitan.overrides.fused_swiglu.fused_swiglu",
                f"{DP} 4",
                f"{EP} 2",
            ),
        ),
    ),
    Case(
        "models",
        "qwen3_moe_fsdp+tp+ep_param_groups",
        (_v(DCG, "--module qwen3 --config qwen3_debugmodel_moe_param_groups", f"{DP} 2", f"{TP} 2", f"{EP} 4"),),
    ),
    Case(
        "models",
        "qwen3_fsdp+tp+cp_no_sp",
        (
            _v(
                "--module qwen3 --config qwen3_debugmodel",
                f"{DP} 2",
                f"{TP} 2",
                "--parallelism.no-enable-sequence-parallel",
                f"{CP} 2",
            ),
            _v("--module qwen3 --config qwen3_debugmodel", f"{DP} 2", f"{TP} 2", f"{CP} 2"),
        ),
        ngpu=8,
    ),
    Case(
        "models",
        "qwen3_fused_qkv_fsdp+tp+cp_compile_helion_rope",
        (
            _v(
                "--module qwen3 --config qwen3_debugmodel",
                f"{DP} 2",
                f"{TP} 2",
                f"{CP} 2",
                "--compile.enable",
                "--override.imports torchtitan.overrides.helion_rope.helion_cos_sin_rope",
            ),
        ),
        ngpu=8,
    ),
    Case(
        "models",
        "qwen3_non_fused_qkv_fsdp+tp+cp",
        (_v("--module qwen3 --config qwen3_debugmodel_non_fused_qkv", f"{DP} 2", f"{TP} 2", f"{CP} 2"),),
        ngpu=8,
    ),
    Case(
        "models",
        "qwen3_5_moe_fsdp+tp+ep+pp",
        (_v(DCG, "--module qwen3_5 --config qwen35_debugmodel_moe", f"{DP} 2", f"{PP} 2", f"{TP} 2", f"{EP} 4"),),
        ngpu=8,
    ),
    Case(
        "models",
        "qwen3_5_fsdp+tp+varlen_attn+per_op_sac",
        (
            _v(
                DCG,
                "--module qwen3_5 --config qwen35_debugmodel_varlen_attn",
                f"{DP} 2",
                f"{TP} 2",
                "--comm.train_timeout_seconds 600",
                "activation-checkpoint:selective",
            ),
        ),
    ),
    Case(
        "models",
        "gpt_oss_fsdp+tp+ep+compile",
        (_v(DCG, "--module gpt_oss --config gpt_oss_debugmodel", f"{DP} 4", f"{TP} 2", f"{EP} 4", "--compile.enable"),),
        ngpu=8,
    ),
    Case(
        "models",
        "gpt_oss_pp+fsdp+cp+ep+sacop",
        (
            _v(
                DCG,
                "--module gpt_oss --config gpt_oss_debugmodel_flex",
                f"{DP} 2",
                f"{CP} 2",
                "--parallelism.context_parallel_load_balancer ptrr",
                "--parallelism.context_parallel_ptrr_mask_key basic_mask",
                f"{PP} 2",
                f"{SCHED} Interleaved1F1B",
                f"{EP} 4",
                "activation-checkpoint:selective",
            ),
        ),
        ngpu=8,
    ),
    Case(
        "models",
        "gpt_oss_pp+fsdp+ep+sacop",
        (
            _v(
                DCG,
                "--module gpt_oss --config gpt_oss_debugmodel",
                "--training.global_batch_size 64",
                f"{DP} 4",
                f"{PP} 2",
                f"{SCHED} Interleaved1F1B",
                f"{EP} 4",
                "activation-checkpoint:selective",
            ),
        ),
        ngpu=8,
    ),
    Case(
        "models",
        "kimi_k2_5_muon_fsdp+ep",
        (_v(DCG, "--module kimi_k2_7 --config kimi_k2_5_debugmodel", f"{DP} 4", f"{EP} 2", "--training.steps 1"),),
    ),
    Case(
        "models",
        "muse_glimmer_mm_fsdp+tp+sp",
        (_v(DCG, "--module muse_glimmer --config muse_glimmer_debugmodel_mm", f"{DP} 2", f"{TP} 2"),),
    ),
]

H100 = [
    Case("h100", "2d_asynctp_compile", (_v("--compile.enable", f"{TP} 2", "--compile.enable_async_tensor_parallel"),)),
    Case("h100", "float8", (_v("--module llama3 --config llama3_debugmodel_float8"),)),
    Case(
        "h100",
        "fsdp_symm_mem",
        (_v("--parallelism.spmd_backend full_dtensor", "--parallelism.enable-fsdp-symm-mem"),),
        ngpu=2,
    ),
    Case(
        "h100",
        "fsdp+tp+cp+compile+float8",
        (
            _v(
                DCG,
                "--module llama3 --config llama3_debugmodel_float8",
                "--compile.enable",
                f"{DP} 2",
                f"{TP} 2",
                f"{PP} 2",
                "--compile.enable_async_tensor_parallel",
            ),
        ),
        ngpu=8,
    ),
    Case(
        "h100",
        "hsdp+cp+compile+float8",
        (
            _v(
                "--module llama3 --config llama3_debugmodel_float8",
                "--compile.enable",
                f"{DP} 2",
                f"{REP} 2",
                f"{CP} 2",
            ),
        ),
        ngpu=8,
    ),
    Case(
        "h100",
        "deepseek_v3_fsdp+hybridep+compile",
        (
            _v(
                "--module deepseek_v3 --config deepseek_v3_debugmodel_hybridep",
                f"{DP} 4",
                f"{EP} 2",
                "--compile.enable",
                "--compile.components model,loss",
            ),
        ),
    ),
    Case(
        "h100",
        "deepseek_v3_fsdp+cp+tp+minimal_async_ep",
        (
            _v(
                "--module deepseek_v3 --config deepseek_v3_debugmodel_minimal_async_ep",
                "--compile.no-enable",
                f"{DP} 2",
                f"{CP} 2",
                f"{TP} 2",
                f"{EP} 8",
                "activation-checkpoint:full",
            ),
        ),
        ngpu=8,
    ),
    Case(
        "h100",
        "dist_gemm",
        (_v("--module llama3 --config llama3_debugmodel_dist_gemm", f"{TP} 2"),),
    ),
]

CASES = FEATURES + MODELS + H100
"""Every test of TorchTitan 0.3's three integration lists, in their order."""


def tokens(variant: tuple[str, ...], dump: str = "") -> list[str]:
    """A variant as the shell splits it (`{dump}`: the test's dump folder)."""
    return shlex.split(" ".join(variant).replace("{dump}", dump))


def split_job(toks: list[str], module: str = "llama3", config: str = "llama3_debugmodel") -> tuple[str, list[str]]:
    """(`MODULE:CONFIG`, the other overrides): run_train.sh's `--module` / `--config` come
    first and a variant's own ones after, so the variant's win."""
    rest: list[str] = []
    it = iter(range(len(toks)))
    for i in it:
        if toks[i] in ("--module", "--config") and i + 1 < len(toks):
            if toks[i] == "--module":
                module = toks[i + 1]
            else:
                config = toks[i + 1]
            next(it, None)
        else:
            rest.append(toks[i])
    return f"{module}:{config}", rest


def with_typechecking(case: Case, toks: list[str], ngpu: int) -> list[str]:
    """TorchTitan's `_configure_spmd_backend_and_typecheck(ing)`: eligible variants get
    `--debug.spmd_typechecking` first and `activation-checkpoint:none` last (features: not
    PP-only, not CP with compile, no explicit AC mode, not on its unsupported list; models: no
    compile, no PP, no explicit AC mode). h100 adds nothing."""
    joined = " ".join(toks)
    if not case.typecheck or case.suite == "h100" or "activation-checkpoint:" in joined:
        return toks
    if case.suite == "models":
        if "compile.enable" in joined or "pipeline_parallel_degree" in joined:
            return toks
    else:
        if (_degree(toks, "pipeline_parallel_degree", 1) > 1 and _pp_only(toks, ngpu)) or (
            "context_parallel_degree" in joined and "compile.enable" in joined
        ):
            return toks
        if case.name in NO_TYPECHECK or (case.name == "2d_eager" and "llama3_debugmodel_ce_loss" in joined):
            return toks
    return ["--debug.spmd_typechecking", *toks, "activation-checkpoint:none"]


NO_TYPECHECK = {
    "1d_compile",
    "1d_compile_sac_op",
    "2d_compile",
    "2d_asynctp_compile",
    "3d_compile",
    "torchcomms_3d_dp+cp+pp+compile",
    "torchcomms_3d_dp+tp+pp+compile",
    "pp_dp_1f1b",
    "pp_tp_gpipe",
    "pp_dp_tp",
    "validation_tp_cp_pp",
    "float8_emulate_lora",
}
"""features.py's `_supports_spmd_typechecking` list."""


def _degree(toks: list[str], key: str, default: int) -> int:
    value = default
    for i, t in enumerate(toks):
        if t.startswith(f"--parallelism.{key}"):
            raw = t.split("=", 1)[1] if "=" in t else (toks[i + 1] if i + 1 < len(toks) else "")
            try:
                value = int(raw)
            except ValueError:
                pass
    return value


def degrees(toks: list[str], ngpu: int) -> dict[str, int]:
    """The parallel degrees a variant asks for, dp_shard filled in (-1: the rest)."""
    d = {
        "pp": _degree(toks, "pipeline_parallel_degree", 1),
        "rep": _degree(toks, "data_parallel_replicate_degree", 1),
        "shard": _degree(toks, "data_parallel_shard_degree", -1),
        "tp": _degree(toks, "tensor_parallel_degree", 1),
        "cp": _degree(toks, "context_parallel_degree", 1),
        "ep": _degree(toks, "expert_parallel_degree", 1),
    }
    if d["shard"] == -1:
        d["shard"] = max(1, ngpu // (d["pp"] * d["rep"] * d["cp"] * d["tp"]))
    return d


def _pp_only(toks: list[str], ngpu: int) -> bool:
    d = degrees(toks, ngpu)
    return d["pp"] > 1 and all(v <= 1 for k, v in d.items() if k != "pp")
