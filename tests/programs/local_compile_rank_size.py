"""torch.compile over a size that differs per rank: in local mode LocalTensor carries it as a
per-rank SymInt, which dynamo (torch 2.13) cannot trace. TorchTitan's context parallel meets
the same when it shards flex attention's BlockMask (a compiled region) under local mode."""

import torch
import torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
t = torch.ones(r + 2)


@torch.compile(backend="eager")
def scale(x, n):
    return x * n


y = scale(t, t.shape[0])
