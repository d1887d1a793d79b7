"""The reference training job of `tracer record CONFIG.toml` (entry `tracer.workloads.train:main`).

Applies the parallelisms in TorchTitan's order on one DeviceMesh: pipeline split first, then
tensor parallel, expert parallel, FSDP; then runs a few AdamW steps on synthetic tokens.

    python -m tracer.workloads.train --config examples/fsdp.toml    # under torchrun, for real
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tracer import config as config_mod
from tracer.workloads import expert_parallel, fsdp, mesh as mesh_mod, pipeline_parallel, tensor_parallel
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
    return config_mod.load(args.config or parser.error("--config is required"))


def batch(cfg: config_mod.JobConfig, dp_rank, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic tokens, different per data-parallel rank and step: the same in fake and local
    mode (dp_rank is a per-rank value under LocalTensorMode), so MoE routing, and with it the
    expert-parallel all_to_all splits, matches between the modes."""
    t, vocab = cfg.training, cfg.model.vocab_size
    g = torch.Generator().manual_seed(1000 + step)
    base = torch.randint(vocab, (t.local_batch_size, t.seq_len + 1), generator=g)
    data = (base * (dp_rank + 1) + dp_rank * 7) % vocab
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def main(argv: list[str] | None = None) -> None:
    cfg = read_config(argv)
    p = cfg.parallelism
    dist.init_process_group("nccl")  # the recorder serves it with its fake backend
    meshes = mesh_mod.build(cfg)
    torch.manual_seed(0)
    pp_enabled = meshes.pp is not None
    if pp_enabled:
        chunks = pipeline_parallel.split(cfg, meshes.pp.get_local_rank())
    else:
        chunks = [(0, Transformer(cfg.model, cfg.training.seq_len))]
    reshard = fsdp.reshard_policy(p.fsdp_reshard_after_forward, pp_enabled)
    for _, chunk in chunks:
        if meshes.tp is not None:
            tensor_parallel.apply(chunk, meshes.tp, p.enable_sequence_parallel)
        if meshes.ep is not None:
            expert_parallel.apply(chunk, meshes.ep)
        if meshes.fsdp is not None:
            fsdp.apply(chunk, meshes.fsdp, reshard=reshard, last_reshard=p.fsdp_reshard_after_forward in
                       ("always", True), expert_mesh=meshes.expert_fsdp)
    params = [q for _, chunk in chunks for q in chunk.parameters()]
    opt = torch.optim.AdamW(params, lr=cfg.optimizer.lr)
    if pp_enabled:
        schedule, stages = pipeline_parallel.build_schedule(cfg, chunks, meshes.pp)
    dp_rank = mesh_mod.dp_rank(meshes)
    for step in range(cfg.training.steps):
        tokens, labels = batch(cfg, dp_rank, step)
        if pp_enabled:
            pipeline_parallel.step(schedule, stages, tokens, labels, cfg.n_stages)
        else:
            model = chunks[0][1]
            logits = model(tokens)
            F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1)).backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
