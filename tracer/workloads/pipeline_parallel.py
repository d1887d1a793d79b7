"""Pipeline parallel with torch.distributed.pipelining, as TorchTitan splits llama3.

The model is cut into pp_degree x stages-per-rank stages as TorchTitan cuts it (pipeline_split.py:
tok_embeddings and norm + output each count as a layer, so splits may be uneven and a stage may
hold no block); the first holds tok_embeddings, the last norm and output. Looped schedules (Interleaved1F1B) give
rank r the stages r, r + pp, r + 2 pp, ...

Stages are torch's own PipelineStage with static input/output shapes, as TorchTitan builds
them: the stages then agree on static shapes in a warm-up vote (one int32 tensor forward
through the stages and back, recorded as the p2p it is) instead of inferring shapes with
object p2p; the vote carries its real values between fake-mode ranks
(tracer/fake/object_collectives.py).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from tracer.config import STAGES_PER_RANK, JobConfig
from tracer.workloads.fsdp import DTYPES
from tracer.workloads.loss import cross_entropy
from tracer.workloads.model import Transformer
from tracer.config.pipeline_split import stage_modules

SCHEDULES = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B, "Interleaved1F1B": ScheduleInterleaved1F1B}


def stage_ids(cfg: JobConfig, pp_rank: int) -> list[int]:
    pp = cfg.parallelism.pipeline_parallel_degree
    return [pp_rank + i * pp for i in range(STAGES_PER_RANK[cfg.parallelism.pipeline_parallel_schedule])]


def split(cfg: JobConfig, pp_rank: int) -> list[tuple[int, Transformer]]:
    """This rank's stages as (stage index, model chunk). Every rank builds the whole model from
    the same seed, then drops what other stages hold (TorchTitan does this on the meta device)."""
    n_stages, p = cfg.n_stages, cfg.parallelism
    modules = stage_modules(n_stages, cfg.model.n_layers, p.pipeline_parallel_first_stage_less_layers,
                            p.pipeline_parallel_last_stage_less_layers)
    chunks = []
    for s in stage_ids(cfg, pp_rank):
        torch.manual_seed(0)
        chunk = Transformer(cfg.model, cfg.training.seq_len)
        for name in list(chunk.layers):
            if f"layers.{name}" not in modules[s]:
                del chunk.layers[name]
        if s != 0:
            chunk.tok_embeddings = None
        if s != n_stages - 1:
            chunk.norm = chunk.output = None  # type: ignore[assignment]
        chunks.append((s, chunk))
    return chunks


def build_schedule(cfg: JobConfig, chunks: list[tuple[int, nn.Module]], pp_mesh: DeviceMesh, tp_group=None):
    """`tp_group`: set under loss parallel, where the last stage's logits are vocab shards."""
    p, t = cfg.parallelism, cfg.training
    n_mb = cfg.n_microbatches
    mb = t.local_batch_size // n_mb
    tp = p.tensor_parallel_degree
    sp = p.enable_sequence_parallel and tp > 1
    dtype = DTYPES[t.mixed_precision_param]  # FSDP computes in the param dtype
    # the residual stream between stages: sequence-sharded under sequence parallel; it needs a
    # gradient, and static metadata says so (else no stage would send gradients back)
    hidden = torch.empty(mb, t.seq_len // tp if sp else t.seq_len, cfg.model.dim, dtype=dtype, requires_grad=True)
    vocab = cfg.model.vocab_size // tp if tp_group is not None else cfg.model.vocab_size
    stages = []
    for s, chunk in chunks:
        first, last = s == 0, s == cfg.n_stages - 1
        inputs = torch.empty(mb, t.seq_len, dtype=torch.long) if first else hidden
        outputs = torch.empty(mb, t.seq_len, vocab, dtype=dtype, requires_grad=True) if last else hidden
        stages.append(PipelineStage(chunk, s, cfg.n_stages, torch.device("cpu"), input_args=inputs,
                                      output_args=outputs, group=pp_mesh.get_group()))
    cls = SCHEDULES[p.pipeline_parallel_schedule]

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, labels, tp_group, cfg.model.vocab_size)

    if cls is ScheduleInterleaved1F1B:
        return cls(stages, n_microbatches=n_mb, loss_fn=loss_fn), stages
    return cls(stages[0], n_microbatches=n_mb, loss_fn=loss_fn), stages


def step(schedule, stages, tokens: torch.Tensor, labels: torch.Tensor, n_stages: int) -> torch.Tensor:
    """One training step's forward and backward through the pipeline (TorchTitan's train_step)."""
    ids = [st.stage_index for st in stages]
    losses: list = []
    if 0 in ids:
        schedule.step(tokens, target=labels, losses=losses)
    elif n_stages - 1 in ids:
        schedule.step(target=labels, losses=losses)
    else:
        schedule.step()
    # the step's loss for logging: the last stage's microbatch losses (other stages log -1)
    return torch.stack(losses).sum() if losses else torch.full((1,), -1.0)  # a factory op: see train.count
