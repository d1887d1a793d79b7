"""A ring of blocking send/recv, then isend/irecv + wait, then batch_isend_irecv."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
nxt, prv = (rank + 1) % world, (rank - 1) % world
buf = torch.empty(4)
if rank % 2 == 0:
    dist.send(torch.ones(4), dst=nxt)
    dist.recv(buf, src=prv)
else:
    dist.recv(buf, src=prv)
    dist.send(torch.ones(4), dst=nxt)
reqs = [dist.isend(torch.ones(2, 3), dst=nxt, tag=7), dist.irecv(torch.empty(2, 3), src=prv, tag=7)]
for r in reqs:
    r.wait()
ops = [dist.P2POp(dist.isend, torch.ones(5), nxt), dist.P2POp(dist.irecv, torch.empty(5), prv)]
for r in dist.batch_isend_irecv(ops):
    r.wait()
