"""Tensor + sequence parallel block on a 1-D mesh of every rank (TorchTitan's plan, in small):
emb row-wise to a sequence-sharded output, the norm on sequence shards, w1 / w2 col / row-wise,
out gathered back.

buggy: the norm has no plan: it runs on each rank's sequence shard with its weight and bias kept
as plain tensors, so their gradients (each rank's shard's contribution) are never reduced over
tp and the replicas drift apart from the first step. healthy: SequenceParallel() on the norm
(its parameters become Replicate DTensors, their gradients are all-reduced)."""

import torch.distributed as dist
from common import setup, train, variant
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

buggy = variant() == "buggy"
model = setup()
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
plan = {
    "emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
    "w1": ColwiseParallel(input_layouts=Shard(1)),
    "w2": RowwiseParallel(output_layouts=Shard(1)),
    "out": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
}
if not buggy:
    plan["norm"] = SequenceParallel()
parallelize_module(model, mesh, plan)
train(model)
