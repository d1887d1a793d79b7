"""Functional collectives (coalesced ones too) fed the un-waited result of another (an
AsyncCollectiveTensor), SPMD, recorded in fake and in local mode. Rank r holds r + 1 (the mesh's
local rank: a value per simulated rank under LocalTensorMode); local mode checks each result
against what real ranks compute (fake mode exchanges nothing: nothing to check)."""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed._local_tensor import enabled_local_tensor_mode
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
r, group = mesh.get_local_rank(), mesh.get_group()
LOCAL = enabled_local_tensor_mode() is not None
total = world * (world + 1) // 2  # the sum of r + 1 over the ranks


def check(got, want):  # waits in both modes (a comparison alone would wait in local mode only)
    got = funcol.wait_tensor(got)
    assert not LOCAL or torch.equal(got, want), (got, want)


x = torch.ones(2) * (r + 1)
y = funcol.all_reduce(funcol.all_gather_tensor(x, 0, group), "sum", group)  # no wait in between
check(y, torch.arange(1.0, world + 1).repeat_interleave(2) * world)
z = funcol.reduce_scatter_tensor(funcol.all_reduce(torch.ones(world) * (r + 1), "sum", group), "sum", 0, group)
check(z, torch.ones(1) * total * world)
w = funcol.all_to_all_single(funcol.all_gather_tensor(x, 0, group), None, None, group)
check(w, (torch.ones(2 * world) * (r + 1)))
v = funcol.broadcast(funcol.all_reduce(x, "max", group), 1, group)
check(v, torch.ones(2) * world)
p, q = funcol.all_reduce_coalesced([funcol.all_gather_tensor(x, 0, group), x], "sum", group)
check(p, torch.arange(1.0, world + 1).repeat_interleave(2) * world)
check(q, torch.ones(2) * total)
s, t = funcol.all_gather_into_tensor_coalesced([x, funcol.all_reduce(x, "sum", group)], group)
check(s, torch.arange(1.0, world + 1).repeat_interleave(2))
check(t, torch.ones(2 * world) * total)
pair = [torch.ones(world) * (r + 1), torch.ones(2 * world)]
m, n = funcol.reduce_scatter_tensor_coalesced(pair, "sum", [0, 0], group)
check(m, torch.ones(1) * total)
check(n, torch.ones(2) * world)
