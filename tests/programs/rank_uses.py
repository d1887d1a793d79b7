"""One rank read (argv[1]) put to one use (argv[2]) that local mode cannot carry: each is refused
in one line naming the read and the use (#31: one rule for every kind of rank read)."""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
world = dist.get_world_size()
group = dist.new_group(list(range(world)))
mesh = init_device_mesh("cpu", (world,))


def read(kind):
    return {
        "get_rank": lambda: dist.get_rank(),
        "group_get_rank": lambda: dist.get_rank(group),
        "group_rank": lambda: group.rank(),
        "mesh_rank": lambda: mesh.get_rank(),
        "mesh_local_rank": lambda: mesh.get_local_rank(),
        "env_rank": lambda: int(os.environ["RANK"]),
        "env_local_rank": lambda: int(os.environ.get("LOCAL_RANK", "0")),
    }[kind]()


def passed_on(rank, x):
    if rank == 0:
        dist.all_reduce(x)               # a collective on rank 0 only


rank = read(sys.argv[1])
use = sys.argv[2]
x = torch.ones(4)
w = torch.ones(4)
if use == "collective":
    passed_on(rank, x)
elif use == "tensor":
    t = torch.tensor([rank])
elif use == "index":
    shard = [10, 11, 12, 13][rank]
elif use == "object":
    got = [None] * world
    dist.all_gather_object(got, rank)
elif use == "else":
    if rank == 0:
        print("rank 0")
    else:
        w = w * 2
elif use == "escape":
    lr = 0.1
    if rank == 0:
        lr = 0.5
    w = w * lr
elif use == "write":
    if rank == 0:
        w.mul_(2)
elif use == "random":
    if rank == 0:
        noise = torch.randn(2)
elif use == "while":
    while rank > 0:
        rank = rank - 1
elif use == "generator_seed":
    g = torch.Generator().manual_seed(1000 + rank)
elif use == "sampler":  # torch.utils.data reads the rank itself to pick each rank's samples
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    data = TensorDataset(torch.arange(16.0))
    for (batch,) in DataLoader(data, batch_size=2, sampler=DistributedSampler(data, shuffle=False)):
        dist.all_reduce(batch)
elif use == "binding":  # a pybind11 setter takes one Python int per process
    opts = dist.ReduceOptions()
    opts.rootRank = rank
elif use == "binding_call":  # the rank made in the call's own arguments
    (lambda o: setattr(o, "rootRank", dist.get_rank()))(dist.ReduceOptions())
elif use == "returns":  # a rank-zero-only wrapper whose value the caller keeps

    def on_rank0(fn):
        def wrapped():
            if rank == 0:
                return fn()
            return None

        return wrapped

    got = on_rank0(lambda: 5)()
dist.all_reduce(w)
