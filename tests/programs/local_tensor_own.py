"""A program that runs its own LocalTensorMode over torch's fake backend (as TorchTitan's
--comm.mode local_tensor does): recorded with --mode local inside commtrace's.

Per rank: a DTensor Shard(0) -> Replicate all-gather ([2, 4] -> [8, 4]) and an all_reduce [3]."""
import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.testing._internal.distributed.fake_pg import FakeStore

world = 4
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
with LocalTensorMode(frozenset(range(world))):
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    x = distribute_tensor(torch.ones(8, 4), mesh, [Shard(0)])
    assert x.redistribute(mesh, [Replicate()]).to_local().shape == (8, 4)
    dist.all_reduce(torch.ones(3))
