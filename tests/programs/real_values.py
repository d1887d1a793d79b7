"""Real values, checked by the program itself: every assert holds on a torchrun job on gloo and
fails on a fake backend (which echoes each rank's own data). SPMD but for the rank's own data."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()

x = torch.full((4,), float(rank))
dist.all_reduce(x)
assert torch.equal(x, torch.full((4,), float(sum(range(world))))), x

seed = torch.tensor([1234 + rank])
dist.broadcast(seed, src=0)
assert seed.item() == 1234, seed  # every rank now holds rank 0's

out = torch.empty(world, dtype=torch.int64)
dist.all_gather_into_tensor(out, torch.tensor([rank * 10]))
assert out.tolist() == [r * 10 for r in range(world)], out

box = [{"rank": rank}] if rank == 0 else [None]
dist.broadcast_object_list(box, src=0)
assert box[0] == {"rank": 0}, box

if rank == 0:
    dist.send(torch.tensor([7.0]), dst=world - 1)
elif rank == world - 1:
    got = torch.zeros(1)
    dist.recv(got, src=0)
    assert got.item() == 7.0, got
dist.barrier()
