"""Pipeline parallel with torch.distributed.pipelining, as TorchTitan splits llama3.

The model is cut into pp_degree x stages-per-rank stages of n_layers / stages blocks each; the
first holds tok_embeddings, the last norm and output. Looped schedules (Interleaved1F1B) give
rank r the stages r, r + pp, r + 2 pp, ...

Stages get static input/output shapes: without them PipelineStage infers shapes by sending
metadata objects over p2p (send_object_list), which a fake process group cannot carry. With
them it only runs its warm-up vote (one int32 tensor forward through the stages and back).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from tracer.config import STAGES_PER_RANK, JobConfig
from tracer.workloads.model import Transformer

SCHEDULES = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B, "Interleaved1F1B": ScheduleInterleaved1F1B}


class StaticStage(PipelineStage):
    """A PipelineStage whose warm-up vote always comes out STATIC.

    The vote still runs (its sends and recvs are part of the comm pattern), but on a fake
    process group a recv leaves its buffer as it was, so the vote would read 0 ("some stage
    needs dynamic shape inference") and fall back to object p2p. Every stage here has complete
    static plain-tensor metadata, so a real run's vote is unanimous: return that."""

    def _warmup_backward_result(self, received_result=None):
        super()._warmup_backward_result(received_result)
        # a literal, not torch.ones: under fake compute FakeTensorMode knows a literal's value
        # (the schedule reads it with .item())
        return torch.tensor([1], dtype=torch.int32)


def stage_ids(cfg: JobConfig, pp_rank: int) -> list[int]:
    pp = cfg.parallelism.pipeline_parallel_degree
    return [pp_rank + i * pp for i in range(STAGES_PER_RANK[cfg.parallelism.pipeline_parallel_schedule])]


def split(cfg: JobConfig, pp_rank: int) -> list[tuple[int, Transformer]]:
    """This rank's stages as (stage index, model chunk). Every rank builds the whole model from
    the same seed, then drops what other stages hold (TorchTitan does this on the meta device)."""
    n_stages = cfg.n_stages
    per_stage = cfg.model.n_layers // n_stages
    chunks = []
    for s in stage_ids(cfg, pp_rank):
        torch.manual_seed(0)
        chunk = Transformer(cfg.model, cfg.training.seq_len)
        keep = range(s * per_stage, (s + 1) * per_stage)
        for name in list(chunk.layers):
            if int(name) not in keep:
                del chunk.layers[name]
        if s != 0:
            chunk.tok_embeddings = None
        if s != n_stages - 1:
            chunk.norm = chunk.output = None
        chunks.append((s, chunk))
    return chunks


def build_schedule(cfg: JobConfig, chunks: list[tuple[int, nn.Module]], pp_mesh: DeviceMesh):
    p, t = cfg.parallelism, cfg.training
    n_mb = cfg.n_microbatches
    mb = t.local_batch_size // n_mb
    sp = p.enable_sequence_parallel and p.tensor_parallel_degree > 1
    # the residual stream between stages: sequence-sharded under sequence parallel; it needs a
    # gradient, and static metadata says so (else no stage would send gradients back)
    hidden = torch.empty(mb, t.seq_len // p.tensor_parallel_degree if sp else t.seq_len, cfg.model.dim,
                         requires_grad=True)
    stages = []
    for s, chunk in chunks:
        first, last = s == 0, s == cfg.n_stages - 1
        inputs = torch.empty(mb, t.seq_len, dtype=torch.long) if first else hidden
        outputs = torch.empty(mb, t.seq_len, cfg.model.vocab_size, requires_grad=True) if last else hidden
        stages.append(StaticStage(chunk, s, cfg.n_stages, torch.device("cpu"), input_args=inputs,
                                    output_args=outputs, group=pp_mesh.get_group()))
    cls = SCHEDULES[p.pipeline_parallel_schedule]
    if cls is ScheduleInterleaved1F1B:
        return cls(stages, n_microbatches=n_mb, loss_fn=loss_fn), stages
    return cls(stages[0], n_microbatches=n_mb, loss_fn=loss_fn), stages


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def step(schedule, stages, tokens: torch.Tensor, labels: torch.Tensor, n_stages: int) -> None:
    """One training step's forward and backward through the pipeline (TorchTitan's train_step)."""
    ids = [st.stage_index for st in stages]
    losses: list = []
    if 0 in ids:
        schedule.step(tokens, target=labels, losses=losses)
    elif n_stages - 1 in ids:
        schedule.step(target=labels, losses=losses)
    else:
        schedule.step()
