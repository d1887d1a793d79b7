"""TorchTitan 0.3's own integration tests (titan_cases.py), through the adapter: every variant is
planned (parsed by TorchTitan's own parser) or refused in one line naming its cause, and a few
record with zero findings. The whole list: `python bench/titan_matrix.py` (make titan-matrix)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from titan_cases import CASES, split_job, tokens, with_typechecking

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
pytestmark = [
    pytest.mark.torchtitan,
    pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None, reason="TorchTitan is not installed"),
]

REFUSED_AT_PLAN = {
    "fsdp+cp": "unknown TorchTitan config 'llama3_debugmodel_fsdp2_cp2' in module 'torchtitan_recipes.tests'",
    "torchcomms_3d_dp+cp+pp+compile": "comm.mode 'torchcomms' cannot be simulated",
    "torchcomms_3d_dp+tp+pp+compile": "comm.mode 'torchcomms' cannot be simulated",
    "qwen3_5_moe_fsdp+tp+ep+pp": "needs the package 'fla'",  # flash-linear-attention
    "qwen3_5_fsdp+tp+varlen_attn+per_op_sac": "needs the package 'fla'",
    "kimi_k2_5_muon_fsdp+ep": "needs the package 'torchvision'",
    "muse_glimmer_mm_fsdp+tp+sp": "needs the package 'torchvision'",
    "fsdp_symm_mem": "CUDA symmetric memory",
    "deepseek_v3_fsdp+cp+tp+minimal_async_ep": "minimal_async_ep: its all-to-allv runs over CUDA symmetric memory",
    "deepseek_v3_fsdp+hybridep+compile": "hybridep: DeepEP's HybridEP kernels",
    "dist_gemm": "dist_gemm runs only under spmd_backend spmd_types",  # torch 2.13's FSDP refuses it
}
"""Tests refused before any rank runs, with the line's cause."""


def test_the_transcription_is_torchtitans_list():
    """features.py, models.py and h100.py of TorchTitan's release/0.3: 40, 15 and 8 tests."""
    by_suite = {s: [c for c in CASES if c.suite == s] for s in ("features", "models", "h100")}
    assert [len(v) for v in by_suite.values()] == [40, 15, 8]
    assert sum(len(c.variants) for c in CASES) == 71
    assert {c.name for c in CASES if c.disabled} == {
        "2d_asynctp_compile",
        "pp_looped_zero_bubble",
        "pp_zbv",
        "pp_custom_csv",
        "torchcomms_3d_dp+cp+pp+compile",
        "torchcomms_3d_dp+tp+pp+compile",
    }
    # run_train.sh's --module / --config, then a variant's own: the variant's win
    spec, rest = split_job(tokens(by_suite["features"][3].variants[1]))
    assert spec == "llama3:llama3_debugmodel_ce_loss" and rest == ["--parallelism.tensor_parallel_degree", "2"]
    # TorchTitan's typechecking wrapper: before and after, where its rules allow
    hsdp = next(c for c in CASES if c.name == "hsdp")
    toks = with_typechecking(hsdp, tokens(hsdp.variants[0]), hsdp.ngpu)
    assert toks[0] == "--debug.spmd_typechecking" and toks[-1] == "activation-checkpoint:none"
    pp = next(c for c in CASES if c.name == "pp_1f1b")
    assert "--debug.spmd_typechecking" not in with_typechecking(pp, tokens(pp.variants[0]), pp.ngpu)


def _plan_all() -> dict[tuple[str, int], str]:
    """Every enabled variant planned in one process: "" when accepted, else the one line."""
    from tracer.adapters.torchtitan.errors import TorchTitanError
    from tracer.adapters.torchtitan.job import from_spec
    from tracer.adapters.torchtitan.plan import plan

    out = {}
    for case in CASES:
        if case.disabled and not case.name.startswith("torchcomms"):
            continue
        for k, variant in enumerate(case.variants):
            spec, rest = split_job(with_typechecking(case, tokens(variant, "/tmp/dump"), case.ngpu))
            try:
                plan(from_spec(spec, rest + ["--training.steps", "2"]), world_size=case.ngpu, mode=None)
                out[(case.name, k)] = ""
            except TorchTitanError as e:
                out[(case.name, k)] = str(e)
    return out


def test_every_variant_is_planned_or_refused_in_one_line():
    """The parse every rank would do, up front: subcommand tokens followed by more options
    (`activation-checkpoint:none` after everything), `--x=y` spellings, per-test configs."""
    code = (
        f"import json, sys; sys.path.insert(0, {HERE!r}); import test_torchtitan_matrix as m; "
        "print(json.dumps({f'{n}#{k}': v for (n, k), v in m._plan_all().items()}))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    import json

    got = json.loads(p.stdout.strip().splitlines()[-1])
    refused = {k: v for k, v in got.items() if v}
    for key, why in refused.items():
        assert "\n" not in why and why, key
    by_test = {k.split("#")[0] for k in refused}
    assert by_test == set(REFUSED_AT_PLAN), refused
    for name, words in REFUSED_AT_PLAN.items():
        assert all(words in v for k, v in refused.items() if k.startswith(name + "#")), refused


def _matrix(*names: str, tmp) -> dict:
    out = tmp / "m.json"
    p = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "bench", "titan_matrix.py"),
            "--only",
            ",".join(names),
            "--json",
            str(out),
            "--work",
            str(tmp),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=3000,
    )
    import json

    assert out.exists(), p.stdout + p.stderr
    return {(r["test"], r["variant"]): r for r in json.loads(out.read_text())["rows"]}


@pytest.mark.records
@pytest.mark.slow
def test_fast_subset_records_clean(tmp_path):
    """Three tests that crashed or were refused before (#28): fused AdamW with bf16 states, the
    fused-SwiGLU override (torchtitan::silu_and_mul), real float8 (SM89 check); ranks 0 and N-1."""
    rows = _matrix("optimizer_bf16_states", "override_fused_swiglu", "float8", tmp=tmp_path)
    assert {k: r["status"] for k, r in rows.items()} == {
        ("optimizer_bf16_states", 0): "clean",
        ("override_fused_swiglu", 0): "clean",
        ("float8", 0): "clean",
    }, rows
