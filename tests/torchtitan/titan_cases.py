"""TorchTitan 0.3's own integration tests, transcribed: `tests/integration_tests/{features,models,
h100}.py` of TorchTitan's release/0.3 branch (titan_features.py, titan_models.py, titan_h100.py:
name, override variants, ngpu, disabled), each variant as TorchTitan's runner passes it to
`run_train.sh` (strings joined by spaces and split by the shell). `with_typechecking` adds what
TorchTitan's build functions add to eligible variants (`--debug.spmd_typechecking` before,
`activation-checkpoint:none` after). `bench/titan_matrix.py` records each one through `tracer
record --torchtitan`; `test_torchtitan_matrix.py` runs a few. Data only: no test here.
"""

from __future__ import annotations

import shlex

from titan_case import Case
from titan_features import FEATURES
from titan_h100 import H100
from titan_models import MODELS

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
