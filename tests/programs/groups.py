"""Group creation: new_group, split_group, a 2-D mesh, slicing and _flatten (8 ranks)."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
evens = dist.new_group([0, 2, 4, 6], group_desc="evens")
odds = dist.new_group([1, 3, 5, 7], group_desc="odds")
halves = dist.split_group(split_ranks=[[0, 1, 2, 3], [4, 5, 6, 7]], group_desc="halves")
dist.all_reduce(torch.ones(3), group=halves)
mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
tp = mesh["tp"]
dist.all_reduce(torch.ones(4), group=tp.get_group())
flat = mesh._flatten("dp_tp")
dist.all_reduce(torch.ones(5), group=flat.get_group())
