"""Coalesced collectives, SPMD (the same calls on every rank), recorded in fake and in local mode.
Rank r holds r + 1 (the mesh's local rank: a value per simulated rank under LocalTensorMode). In
local mode every result is checked against what real ranks compute; in fake mode nothing is
exchanged, so there is nothing to check."""
import torch
import torch.distributed as dist
from torch.distributed._local_tensor import enabled_local_tensor_mode
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
world = dist.get_world_size()
r = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",)).get_local_rank()
LOCAL = enabled_local_tensor_mode() is not None
total = world * (world + 1) // 2  # the sum of r + 1 over the ranks


def check(got, want):
    assert not LOCAL or torch.equal(got, want), (got, want)


a, b = torch.ones(2) * (r + 1), torch.ones(3) * 10 * (r + 1)
outs = [[torch.empty(2), torch.empty(3)] for _ in range(world)]
dist.all_gather_coalesced(outs, [a, b])                      # every rank's [2] and [3], in one op
for k in range(world):
    check(outs[k][0], torch.ones(2) * (k + 1))
    check(outs[k][1], torch.ones(3) * 10 * (k + 1))
dist.all_reduce_coalesced([a, b])                            # [2] and [3] summed, in one op
check(a, torch.ones(2) * total)
check(b, torch.ones(3) * 10 * total)
c, d = torch.ones(4) * (r + 1), torch.ones(8) * (r + 1)
with dist._coalescing_manager():                             # -> one all_reduce_coalesced
    dist.all_reduce(c)
    dist.all_reduce(d, op=dist.ReduceOp.SUM)
check(c, torch.ones(4) * total)
check(d, torch.ones(8) * total)
g1, g2 = torch.empty(4 * world), torch.empty(8 * world)
with dist._coalescing_manager(async_ops=True) as cm:         # -> one all_gather_into_tensor_coalesced
    dist.all_gather_into_tensor(g1, torch.ones(4) * (r + 1))
    dist.all_gather_into_tensor(g2, torch.ones(8) * (r + 1))
cm.wait()
check(g1, torch.arange(1.0, world + 1).repeat_interleave(4))
check(g2, torch.arange(1.0, world + 1).repeat_interleave(8))
s1, s2 = torch.empty(1), torch.empty(2)
with dist._coalescing_manager():                             # -> one reduce_scatter_tensor_coalesced
    dist.reduce_scatter_tensor(s1, torch.arange(1.0 * world) + r)
    dist.reduce_scatter_tensor(s2, torch.arange(2.0 * world) + r)
check(s1, (torch.ones(1) * r) * world + (world - 1) * world // 2)
check(s2, (torch.arange(2.0) + 2 * r) * world + (world - 1) * world // 2)
