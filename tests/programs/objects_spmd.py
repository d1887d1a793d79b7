"""Object collectives in an SPMD program (the same Python on every rank; records in both modes):
a broadcast config decides how many all_reduces follow, an all-gathered list their width, a
scattered object their count.

Per rank: 2 broadcasts + 2 all_gathers + (broadcast, 2 scatters) for the objects, then
cfg["steps"] = 2 all_reduces of [sum(widths)] = [12], and work = 3 all_reduces of [1].
"""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
world = dist.get_world_size()

cfg = [{"steps": 2}]
dist.broadcast_object_list(cfg, src=0)

widths = [None] * world
dist.all_gather_object(widths, 3)

work = [None]
dist.scatter_object_list(work, [3] * world, src=0)

for _ in range(cfg[0]["steps"]):
    dist.all_reduce(torch.ones(sum(widths)))
for _ in range(work[0]):
    dist.all_reduce(torch.ones(1))
