"""all_to_all_single whose splits depend on the rank, written SPMD-style through the mesh's
local rank (a per-rank value under LocalTensorMode): rank r sends (r + j) % 3 + 1 rows to j.
Through the functional collective, as expert parallelism does: the c10d binding only takes
plain int split sizes, not LocalTensor's per-rank ones."""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("ep",))
r = mesh.get_local_rank()
splits = [(r + j) % 3 + 1 for j in range(world)]  # symmetric: what j sends r equals this
tokens = torch.ones(sum(splits), 4)
out = funcol.all_to_all_single(tokens, output_split_sizes=splits, input_split_sizes=splits, group=mesh.get_group())
assert out.shape[0] == sum(splits)
