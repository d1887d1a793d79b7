"""TorchTitan 0.3's `tests/integration_tests/h100.py`, transcribed (titan_case.py)."""

from titan_case import CP, DCG, DP, EP, PP, REP, TP, Case, _v

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
