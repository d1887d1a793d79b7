"""Side groups that name their own backend, as Megatron-core's initialize_model_parallel() makes
them (a gloo group beside each NCCL group, for its CPU-side bookkeeping), and one that names a
per-device backend string: each must be served (and recorded) like any other group."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
half = [list(range(world // 2)), list(range(world // 2, world))]
for ranks in half:  # every rank creates every group, in the same order (as new_group requires)
    nccl = dist.new_group(ranks)
    gloo = dist.new_group(ranks, backend="gloo")
    if rank in ranks:
        mine_nccl, mine_gloo = nccl, gloo
mixed = dist.new_group(backend="cpu:gloo,cuda:nccl")
x = torch.ones(4)
dist.all_reduce(x, group=mine_nccl)
flag = torch.tensor([rank])
dist.all_reduce(flag, group=mine_gloo, op=dist.ReduceOp.MAX)
dist.all_reduce(x, group=mixed)
dist.barrier(group=mine_gloo)
