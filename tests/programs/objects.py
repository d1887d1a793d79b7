"""Object collectives driving control flow, torchrun style (4 ranks): rank 0 decides a config and
hands out work; what each rank then communicates depends on what it received.

Per rank, on the world group: broadcast_object_list (2 broadcasts: sizes, bytes),
all_gather_object (2 all_gathers), gather_object (an all_gather of sizes, a gather of bytes),
scatter_object_list (a broadcast of the max size, 2 scatters); send_object_list /
recv_object_list between ranks 2k and 2k+1 (2 sends / 2 recvs); then the received values
decide: cfg["steps"] = 3 all_reduces of [cfg["width"]] = [6], max(all ranks' counts) = 4
all_reduces of [2], and rank 2k+1 sends rank 2k a [work(2k), 6] tensor, work(r) = r + 1.
"""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

cfg = [{"steps": 3, "width": 6}] if rank == 0 else [None]
dist.broadcast_object_list(cfg, src=0)
steps, width = cfg[0]["steps"], cfg[0]["width"]

counts = [None] * world
dist.all_gather_object(counts, rank + 1)

reports = [None] * world if rank == 0 else None
dist.gather_object({"rank": rank, "ready": True}, reports, dst=0)
if rank == 0:
    assert [r["rank"] for r in reports] == list(range(world)), reports

work = [None]
dist.scatter_object_list(work, [r + 1 for r in range(world)] if rank == 0 else None, src=0)

if rank % 2 == 0:
    dist.send_object_list([(work[0], width)], dst=rank + 1)
    dist.recv(torch.empty(work[0], width), src=rank + 1)
else:
    shape = [None]
    dist.recv_object_list(shape, src=rank - 1)
    dist.send(torch.ones(*shape[0]), dst=rank - 1)

x = torch.ones(width)
for _ in range(steps):
    dist.all_reduce(x)
for _ in range(max(counts)):
    dist.all_reduce(torch.ones(2))
dist.destroy_process_group()
