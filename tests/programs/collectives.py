"""Every c10d collective once, on the world group of 4 ranks (SPMD: same calls on every rank)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.ones(8)
dist.all_reduce(x)                                               # sum, (8,)
dist.all_reduce(x, op=dist.ReduceOp.MAX, async_op=True).wait()  # max, async + wait
dist.all_gather([torch.empty(8) for _ in range(world)], x)       # list variant
dist.all_gather_into_tensor(torch.empty(8 * world), x)
dist.reduce_scatter(torch.empty(8), [torch.ones(8) for _ in range(world)])
dist.reduce_scatter_tensor(torch.empty(2), x)
dist.broadcast(x, src=1)
dist.gather(x, [torch.empty(8) for _ in range(world)] if rank == 0 else None, dst=0)
dist.scatter(torch.empty(8), [torch.ones(8) for _ in range(world)] if rank == 3 else None, src=3)
dist.all_to_all([torch.empty(2) for _ in range(world)], list(torch.ones(8).chunk(world)))
dist.all_to_all_single(torch.empty(8), torch.ones(8))            # equal splits
dist.all_to_all_single(torch.empty(12), torch.ones(12), output_split_sizes=[3, 3, 3, 3],
                       input_split_sizes=[3, 3, 3, 3])
with dist._coalescing_manager(async_ops=False):
    dist.all_reduce(torch.ones(3))
    dist.all_reduce(torch.ones(5))
dist.barrier()
x64 = torch.ones(4, dtype=torch.float64)
dist.all_reduce(x64)
