"""all_to_all_single whose splits depend on the rank, written SPMD-style through the mesh's
local rank (a per-rank value under LocalTensorMode): rank r sends (r + j) % 3 + 1 rows to j."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("ep",))
r = mesh.get_local_rank()
splits = [(r + j) % 3 + 1 for j in range(world)]  # symmetric: what j sends r equals this
tokens = torch.ones(sum(splits), 4)
out = torch.empty(sum(splits), 4)
dist.all_to_all_single(out, tokens, output_split_sizes=splits, input_split_sizes=splits, group=mesh.get_group())
