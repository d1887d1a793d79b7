"""TorchTitan 0.3's `tests/integration_tests/models.py`, transcribed (titan_case.py)."""

from titan_case import CP, DCG, DP, EP, PP, REP, SCHED, TP, Case, _v

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
