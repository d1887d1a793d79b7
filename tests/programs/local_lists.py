"""The list forms of c10d's collectives, SPMD, recorded in fake and in local mode. Rank r holds
r + 1 (the mesh's local rank: a value per simulated rank under LocalTensorMode); local mode
checks each result against what real ranks compute (fake mode exchanges nothing). A gather's or a
scatter's list exists on its root only: local mode runs rank 0's Python for every rank, so the
root is rank 0 and `LOCAL or` keeps local mode from reading its rank."""
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


x = torch.ones(3) * (r + 1)
gathered = [torch.empty(3) for _ in range(world)]
dist.all_gather(gathered, x)
for k in range(world):
    check(gathered[k], torch.ones(3) * (k + 1))
out = torch.empty(2)
dist.reduce_scatter(out, [torch.ones(2) * (10 * (r + 1) + k) for k in range(world)])
check(out, torch.ones(2) * (10 * total + world * r))
root_list = [torch.empty(3) for _ in range(world)] if LOCAL or dist.get_rank() == 0 else None
dist.gather(x, root_list, dst=0)
if LOCAL:
    for k in range(world):  # rank 0's list (the others' are not theirs to hold)
        assert torch.equal(root_list[k]._local_tensors[0], torch.ones(3) * (k + 1))
scattered = torch.empty(2)
to_scatter = [torch.ones(2) * (100 + k) for k in range(world)] if LOCAL or dist.get_rank() == 0 else None
dist.scatter(scattered, to_scatter, src=0)
check(scattered, torch.ones(2) * (100 + r))
sent = [torch.ones(2) * (10 * (r + 1) + k) for k in range(world)]
received = [torch.empty(2) for _ in range(world)]
dist.all_to_all(received, sent)
for k in range(world):
    check(received[k], torch.ones(2) * (10 * (k + 1)) + r)
y = torch.ones(4) * (r + 1)
dist.broadcast(y, src=2)
check(y, torch.ones(4) * 3)
