"""A scatter rooted at rank 1 (DTensor's distribute_tensor with src_data_rank=1): the scatter list
exists in rank 1's Python only. Fake mode records it; local mode, which runs rank 0's Python for
every rank, has no list to scatter from and refuses in one line naming the op."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
x = distribute_tensor(torch.arange(8.0).reshape(8, 1), mesh, [Shard(0)], src_data_rank=1)
