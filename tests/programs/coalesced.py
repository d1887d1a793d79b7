"""Coalesced collectives on 4 ranks, each as torch dispatches it.

Inside `_coalescing_manager` the c10d calls are queued and issued at its exit as one coalesced
op (c10d.allgather_into_tensor_coalesced_, reduce_scatter_tensor_coalesced_,
allreduce_coalesced_), even for a single tensor; the same calls outside one, and the plain
functional collectives, are the plain ops. The functional *_coalesced collectives are coalesced
for any number of tensors.
"""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.distributed_c10d import _coalescing_manager

dist.init_process_group("nccl")
n = dist.get_world_size()
g = dist.group.WORLD
a, b = torch.ones(4), torch.ones(2)
out_a, out_b = torch.empty(4 * n), torch.empty(2 * n)

with _coalescing_manager(group=g):
    dist.all_gather_into_tensor(out_a, a)
with _coalescing_manager(group=g, async_ops=True) as cm:
    dist.all_gather_into_tensor(out_a, a)
    dist.all_gather_into_tensor(out_b, b)
cm.wait()
with _coalescing_manager(group=g):
    dist.reduce_scatter_tensor(a, out_a)
with _coalescing_manager(group=g):
    dist.all_reduce(a)
    dist.all_reduce(b)
with _coalescing_manager(group=g):
    dist.all_reduce(a)

dist.all_gather_into_tensor(out_a, a)
dist.reduce_scatter_tensor(a, out_a)
funcol.wait_tensor(funcol.all_gather_tensor(a, 0, g))
funcol.wait_tensor(torch.ops._c10d_functional.reduce_scatter_tensor_out(out_a, "sum", n, g.group_name, out=a))
(x,) = funcol.all_gather_single_coalesced([a], g)
(y,) = funcol.reduce_scatter_single_coalesced([out_a], "sum", [0], g)
funcol.wait_tensor(x), funcol.wait_tensor(y)
dist.all_reduce_coalesced([a, b])
