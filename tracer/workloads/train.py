"""The reference training job of `tracer record CONFIG.toml` (entry `tracer.workloads.train:main`).

Applies the parallelisms in TorchTitan's order on TorchTitan's meshes: pipeline split first, then
tensor parallel, expert parallel, activation checkpointing, FSDP; then runs TorchTitan's train
step on synthetic tokens: the global token count summed over the data-parallel ranks, forward
and backward, gradient-norm clipping, AdamW, and on logging steps the loss reductions.

    python -m tracer.workloads.train --config examples/fsdp.toml    # under torchrun, for real
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from tracer import config as config_mod
from tracer.workloads import (activation_checkpoint, expert_parallel, float8, fsdp, grad_norm, mesh as mesh_mod,
                              pipeline_parallel, tensor_parallel)
from tracer.workloads.loss import cross_entropy
from tracer.workloads.model import Transformer


def read_config(argv: list[str] | None = None) -> config_mod.JobConfig:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", help="a TorchTitan-style TOML job config")
    parser.add_argument("--config-json", help="the same, as the JSON the recorder passes")
    args = parser.parse_args(argv)
    if args.config_json:
        raw = json.loads(args.config_json)
        raw["job"] = {}  # the workload itself is what runs
        return config_mod.from_dict(raw)
    world = os.environ.get("WORLD_SIZE")  # under torchrun the launcher fixes the world size
    return config_mod.load(args.config or parser.error("--config is required"), int(world) if world else None)


def batch(cfg: config_mod.JobConfig, dp_rank, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic tokens, different per data-parallel rank and step: the same in fake and local
    mode (dp_rank is a per-rank value under LocalTensorMode), so MoE routing, and with it the
    expert-parallel all_to_all splits, matches between the modes. A numerics twin
    (`[tracer] twin_of_dp = D`, one rank) takes the D dp ranks' batches together."""
    t, vocab = cfg.training, cfg.model.vocab_size
    g = torch.Generator().manual_seed(1000 + step)
    base = torch.randint(vocab, (t.local_batch_size, t.seq_len + 1), generator=g)
    if cfg.tracer.twin_of_dp > 0:
        data = torch.cat([(base * (d + 1) + d * 7) % vocab for d in range(cfg.tracer.twin_of_dp)])
    else:
        data = (base * (dp_rank + 1) + dp_rank * 7) % vocab
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def parallelize(cfg: config_mod.JobConfig, meshes: mesh_mod.Meshes, chunk: torch.nn.Module) -> None:
    """TorchTitan's order on one model chunk: model converters (float8), tensor (+ expert)
    parallel, activation checkpointing, FSDP."""
    p, t, ac = cfg.parallelism, cfg.training, cfg.activation_checkpoint
    if cfg.model.converters:
        float8.convert(chunk, cfg)
    if meshes.tp is not None:
        tensor_parallel.apply(chunk, meshes.tp, p.enable_sequence_parallel, loss_parallel(cfg),
                              float8=float8.tensorwise_tp(cfg))  # parallelize_llama's enable_float8_tensorwise_tp
    if meshes.ep is not None:
        expert_parallel.apply(chunk, meshes.ep)
    activation_checkpoint.apply(chunk, ac.mode, ac.selective_ac_option)
    fsdp.apply(chunk, meshes.fsdp, policy=p.fsdp_reshard_after_forward, pp_enabled=meshes.pp is not None,
               param_dtype=t.mixed_precision_param, reduce_dtype=t.mixed_precision_reduce,
               expert_mesh=meshes.expert_fsdp)


def loss_parallel(cfg: config_mod.JobConfig) -> bool:
    return cfg.parallelism.tensor_parallel_degree > 1 and not cfg.parallelism.disable_loss_parallel


def count(n: int) -> torch.Tensor:
    """An int64 scalar made by a factory op, not torch.tensor(n): under fake compute a tensor
    built from Python data is a constant that FakeTensorMode also runs for real, which would
    issue its collective twice."""
    return torch.full((), n, dtype=torch.int64)


def log_metrics(meshes: mesh_mod.Meshes, loss: torch.Tensor, tokens: int) -> None:
    """TorchTitan's logging step over the data-parallel ranks: loss sum, loss max, tokens seen."""
    group = meshes.loss.get_group()
    funcol.all_reduce(loss.detach().float(), "sum", group).wait()
    funcol.all_reduce(loss.detach().float(), "max", group).wait()
    funcol.all_reduce(count(tokens), "sum", group).wait()


def main(argv: list[str] | None = None) -> None:
    cfg = read_config(argv)
    dist.init_process_group("nccl")  # the recorder serves it with its fake backend
    meshes = mesh_mod.build(cfg)
    torch.manual_seed(0)
    pp_enabled = meshes.pp is not None
    if pp_enabled:
        chunks = pipeline_parallel.split(cfg, meshes.pp.get_local_rank())  # type: ignore[union-attr]
    else:
        chunks = [(0, Transformer(cfg.model, cfg.training.seq_len))]
    for _, chunk in chunks:
        parallelize(cfg, meshes, chunk)
    tp_group = meshes.tp.get_group() if loss_parallel(cfg) else None  # type: ignore[union-attr]
    params = [q for _, chunk in chunks for q in chunk.parameters()]
    opt = torch.optim.AdamW(params, lr=cfg.optimizer.lr)
    if pp_enabled:
        schedule, stages = pipeline_parallel.build_schedule(cfg, chunks, meshes.pp, tp_group)
    dp_rank = mesh_mod.dp_rank(meshes)
    seen = 0
    for step in range(cfg.steps):
        tokens, labels = batch(cfg, dp_rank, step)
        seen += labels.numel()
        global_tokens = None
        if meshes.dp_enabled:  # the loss is normalised by the global token count (FSDP sums gradients)
            global_tokens = funcol.all_reduce(count(labels.numel()), "sum", meshes.batch.get_group()).wait()
        if pp_enabled:
            loss = pipeline_parallel.step(schedule, stages, tokens, labels, cfg.n_stages)
        else:
            loss = cross_entropy(chunks[0][1](tokens), labels, tp_group, cfg.model.vocab_size, global_tokens)
            loss.backward()
        grad_norm.clip_(params, cfg.training.max_norm, meshes.pp, meshes.ep is not None)
        opt.step()
        if float8.precompute(cfg):  # the converters' post_optimizer_hook (a step post-hook)
            float8.post_optimizer_hook([chunk for _, chunk in chunks])
        opt.zero_grad()
        if meshes.dp_enabled and (step == 0 or (step + 1) % cfg.metrics.log_freq == 0):  # TorchTitan counts from 1
            log_metrics(meshes, loss, seen)


if __name__ == "__main__":
    main()
