"""What a CPU lacks for TorchTitan 0.3, filled in by the adapter: its CUDA-only custom ops, torch's
CPU fused AdamW with bf16 optimizer states, the validator's finite dataloader, and the job's
own parse (subcommand tokens, missing optional packages). Each one crashed or misled before."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tracer.adapters.torchtitan import cpu_kernels
from tracer.adapters.torchtitan import job as tt_job

needs_torchtitan = pytest.mark.skipif(
    importlib.util.find_spec("torchtitan") is None, reason="TorchTitan is not installed"
)


@needs_torchtitan
@pytest.mark.torchtitan
def test_silu_and_mul_runs_on_cpu_with_its_gradient():
    from tracer.adapters.torchtitan import runtime

    runtime.prepare()
    importlib.import_module("torchtitan.models.common")  # loaded by the config parse before the overrides
    importlib.import_module(cpu_kernels.SILU_AND_MUL_MODULE)  # what --override.imports loads
    cpu_kernels.install_custom_ops()
    g = torch.randn(6, 8, generator=torch.Generator().manual_seed(0), requires_grad=True)
    u = torch.randn(6, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
    out = torch.ops.torchtitan.silu_and_mul(g, u)
    ref = torch.nn.functional.silu(g) * u
    torch.testing.assert_close(out, ref)
    (gg, gu) = torch.autograd.grad(out.sum() * 1.0, (g, u))
    (rg, ru) = torch.autograd.grad(ref.sum(), (g, u))
    torch.testing.assert_close(gg, rg)
    torch.testing.assert_close(gu, ru)
    # offsets limit the computed rows to offsets[-1] (grouped experts' padded rows stay 0)
    limited = torch.ops.torchtitan.silu_and_mul(g.detach(), u.detach(), torch.tensor([2, 4]))
    torch.testing.assert_close(limited[:4], ref.detach()[:4])
    assert limited[4:].abs().sum() == 0
    # shapes only: the op's own fake implementation still answers under FakeTensorMode
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        f = torch.ops.torchtitan.silu_and_mul(torch.empty(3, 4, dtype=torch.bfloat16), torch.empty(3, 4))
    assert f.shape == (3, 4) and f.dtype == torch.bfloat16


@needs_torchtitan
@pytest.mark.torchtitan
def test_helion_rope_overrides_take_torchtitans_cpu_fallback_without_helion():
    """`--override.imports torchtitan.overrides.helion_rope.*` (deepseek_v3 mtp, qwen3 fused
    qkv): without helion (which needs triton) the override raised ImportError at build. Now it
    builds TorchTitan's Helion module, which on CPU tensors computes the stock RoPE."""
    from tracer.adapters.torchtitan import runtime

    runtime.prepare()
    from torchtitan.models.common.rope import ComplexRoPE

    cpu_kernels.helion_rope_on_cpu(["--override.imports", cpu_kernels.HELION_ROPE_MODULE + ".helion_complex_rope"])
    helion_rope = importlib.import_module(cpu_kernels.HELION_ROPE_MODULE)
    cfg = ComplexRoPE.Config(dim=16, max_seq_len=32)
    fused, stock = helion_rope.helion_complex_rope(cfg).build(), cfg.build()
    assert type(fused).__name__ == "HelionComplexRoPE"
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 8, 4, 16, generator=gen), torch.randn(2, 8, 4, 16, generator=gen)
    for a, b in zip(fused(q, k), stock(q, k), strict=True):
        assert torch.equal(a, b)


def test_fake_values_answer_only_commtraces_own_fake_tensors():
    """`.item()` of a fake tensor answers 0 under commtrace's fake compute (a value TorchTitan
    only logs), never for another FakeTensorMode's tensors: dynamo traces a compiled region
    with its own, and read as 0 gpt_oss's MoE token counts became 0-token all-to-all splits
    (`--compile.enable` with EP: a fake-tensor error)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tracer.adapters.torchtitan import fake_values
    from tracer.fake.compute import FakeCompute

    saved = torch.Tensor.item, torch.Tensor.__int__, torch.Tensor.__float__
    fake_values.install()
    try:
        with FakeCompute(rec=None):  # type: ignore[arg-type]
            assert torch.ones(3).sum().item() == 0 and int(torch.ones(())) == 0
        with FakeTensorMode():
            with pytest.raises(Exception, match="_local_scalar_dense"):  # torch: DataDependentOutputException
                torch.ones(3).sum().item()
        assert torch.ones(3).sum().item() == 3.0  # a real tensor: its value
    finally:
        torch.Tensor.item, torch.Tensor.__int__, torch.Tensor.__float__ = saved


def test_fused_adamw_takes_bf16_states_on_cpu():
    """TorchTitan's fused_opt_states_bf16: fp32 params, bf16 exp_avg / exp_avg_sq, fused AdamW."""
    cpu_kernels.install_fused_adam()
    p = torch.nn.Parameter(torch.ones(4, 3))
    opt = torch.optim.AdamW([p], lr=0.1, fused=True)
    p.grad = torch.full_like(p, 0.5)
    opt.step()  # states created in fp32 by torch; made bf16 as TorchTitan's state hook does
    for k in ("exp_avg", "exp_avg_sq"):
        opt.state[p][k] = opt.state[p][k].to(torch.bfloat16)
    ref = torch.nn.Parameter(p.detach().clone())
    ref_opt = torch.optim.AdamW([ref], lr=0.1, fused=False)
    ref_opt.state[ref] = {k: (v.float() if k != "step" else v.clone()) for k, v in opt.state[p].items()}
    p.grad = torch.full_like(p, 0.25)
    ref.grad = torch.full_like(ref, 0.25)
    opt.step()
    ref_opt.step()
    assert opt.state[p]["exp_avg"].dtype == torch.bfloat16  # the state keeps its dtype
    torch.testing.assert_close(p.detach(), ref.detach(), atol=1e-3, rtol=1e-3)


@needs_torchtitan
@pytest.mark.torchtitan
def test_synthetic_tokens_take_the_validators_dataloader_config():
    """Validator: `replace(config.dataloader, infinite=steps != -1)`; -1 consumes the set."""
    from dataclasses import replace

    from tracer.adapters.torchtitan import runtime

    runtime.prepare()
    from tracer.adapters.torchtitan.synthetic_data import SyntheticTokens

    finite = replace(SyntheticTokens.Config(vocab_size=16), infinite=False)
    loader = SyntheticTokens(finite, dp_rank=0, seq_len=4, local_batch_size=2)
    batches = list(loader)
    assert len(batches) == finite.finite_batches == 2
    assert batches[0][0]["input"].shape == (2, 4) and batches[0][1].shape == (2, 4)


def test_subcommand_tokens_go_last_with_their_own_options():
    """TorchTitan's tests write `activation-checkpoint:selective` among the overrides; tyro
    applies what follows it to the subcommand, so `--training.steps 2` after it read as unknown."""
    job = tt_job.from_spec(
        "llama3:llama3_debugmodel",
        [
            "--compile.enable",
            "activation-checkpoint:selective",
            "--training.steps",
            "2",
            "--activation-checkpoint.no-preserve-rng-state",
            "--parallelism.tensor_parallel_degree=2",
        ],
    )
    assert job.args[-2:] == ["activation-checkpoint:selective", "--activation-checkpoint.no-preserve-rng-state"]
    assert job.args.index("--training.steps") < job.args.index("activation-checkpoint:selective")
    # given twice (TorchTitan's suffix `activation-checkpoint:none`), the last choice is the one
    twice = tt_job.subcommands_last(["activation-checkpoint:full", "--x.y", "1", "activation-checkpoint:none"])
    assert twice == ["--x.y", "1", "activation-checkpoint:none"]


@needs_torchtitan
@pytest.mark.torchtitan
def test_options_after_a_subcommand_token_parse():
    job = tt_job.from_spec(
        "llama3:llama3_debugmodel", ["activation-checkpoint:full", "--training.steps", "2", "--training.seq_len", "64"]
    )
    cfg = tt_job.check(job)
    assert cfg.training.steps == 2 and cfg.training.seq_len == 64
    assert type(cfg.activation_checkpoint).__qualname__ == "FullAC.Config"


@needs_torchtitan
@pytest.mark.torchtitan
def test_a_missing_optional_package_is_named(monkeypatch):
    """muse_glimmer's multimodal data imports torchvision: the package is the cause, not the module."""
    import builtins

    real_import = builtins.__import__

    def no_torchvision(name, *args, **kwargs):
        if name.split(".")[0] == "torchvision":
            raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}", name=name.split(".")[0])
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torchvision)
    with pytest.raises(tt_job.TorchTitanError) as e:
        tt_job.check(tt_job.from_spec("muse_glimmer:muse_glimmer_debugmodel_mm", []))
    msg = str(e.value)
    assert "needs the package 'torchvision'" in msg and "pip install torchvision" in msg
    assert "unknown TorchTitan module" not in msg


def test_spmd_types_stays_where_torch_runs_it(monkeypatch):
    """TorchTitan 0.3's default spmd_backend is not swapped unless torch's FSDP refuses it."""
    monkeypatch.setattr(tt_job, "spmd_types_fsdp_gap", lambda: None)
    args = tt_job.from_spec("llama3:llama3_debugmodel", []).args
    assert "--parallelism.spmd_backend" not in args
    monkeypatch.setattr(tt_job, "spmd_types_fsdp_gap", lambda: "torch 2.13.0's FSDP refuses ...")
    args = tt_job.from_spec("llama3:llama3_debugmodel", ["--parallelism.spmd_backend", "full_dtensor"]).args
    # the fallback comes first: the user's own choice wins
    assert args.index("partial_dtensor") < args.index("full_dtensor")


def test_the_fsdp_gap_is_read_from_torchs_own_code():
    import torch
    from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam

    refuses = any(
        isinstance(c, str) and "all parameters must be DTensors" in c
        for c in FSDPParam._init_sharding_spec.__code__.co_consts
    )
    gap = tt_job.spmd_types_fsdp_gap()
    assert (gap is not None) == refuses
    if gap:
        assert torch.__version__.split("+")[0] in gap and "pull/187386" in gap


@needs_torchtitan
@pytest.mark.torchtitan
def test_spmd_types_asked_for_on_a_torch_without_it_is_one_line():
    from tracer.adapters.torchtitan.plan import plan

    job = tt_job.from_spec("llama3:llama3_debugmodel", ["--parallelism.spmd_backend", "spmd_types"])
    if tt_job.spmd_types_fsdp_gap() is None:
        assert plan(job, world_size=2, mode=None).config["torchtitan"]["spmd_backend"] == "spmd_types"
        return
    with pytest.raises(tt_job.TorchTitanError, match="spmd_backend spmd_types: torch .* refuses"):
        plan(job, world_size=2, mode=None)


def test_pipeline_eval_takes_microbatch_lists():
    """TorchTitan's validator calls `pp_schedule.eval(arg_mbs=..., target_mbs=..., losses=...)`;
    torch 2.13's eval forwards them to step with target=None (was: 'unexpected keyword ['target']')."""
    from tracer.adapters.torchtitan.pipeline_step import _with_microbatches

    calls = []

    class Stage:
        is_last, output_chunks, has_backward = True, [], True

        def clear_runtime_states(self):
            pass

    class Schedule:
        _has_backward = True
        _stage = Stage()

        def step(self, *args, target=None, losses=None, **kwargs):  # torch 2.13's signature
            raise AssertionError("the whole-batch step is not the one called")

        def eval(self, *args, target=None, losses=None, **kwargs):  # torch 2.13's eval, verbatim in effect
            self._has_backward = False
            return self.step(*args, target=target, losses=losses, **kwargs)

        def _step_microbatches(self, arg_mbs, kwarg_mbs, target_mbs, losses, return_outputs, loss_kwargs=None):
            calls.append((arg_mbs, target_mbs, losses, self._stage.has_backward))

        def _merge_outputs(self, chunks):
            return "merged"

    Schedule.step = _with_microbatches(Schedule.step)
    assert Schedule().eval(arg_mbs=[1, 2], kwarg_mbs=[{}, {}], target_mbs=[3, 4], losses=[]) == "merged"
    assert calls == [([1, 2], [3, 4], [], False)]


def test_varlen_attention_in_math_is_per_document_causal_sdpa():
    """TorchTitan's VarlenAttention calls torch's flash-only varlen_attn; the CPU stand-in gives
    what causal SDPA gives on each packed document."""
    from tracer.adapters.torchtitan.attention import math_varlen_attn

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(7, 4, 8, generator=g) for _ in range(3))
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    out = math_varlen_attn(q, k, v, cu, cu, 4, 4, window_size=(-1, 0))
    for a, b in ((0, 3), (3, 7)):
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1), is_causal=True
        ).transpose(0, 1)
        torch.testing.assert_close(out[a:b], ref)
