"""Tensor parallel MLP (w1 colwise, w2 rowwise) on a 1-D mesh of every rank.

buggy: w2's plan keeps its output Partial and hands the local value on (use_local_output): the
all-reduce that sums the partial products never runs, each rank continues with its own partial
sum. healthy: RowwiseParallel() (output Replicate: the all-reduce runs)."""

from common import setup, train, variant
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
import torch.distributed as dist

buggy = variant() == "buggy"
model = setup()
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
w2 = RowwiseParallel(output_layouts=Partial()) if buggy else RowwiseParallel()
parallelize_module(model, mesh, {"w1": ColwiseParallel(), "w2": w2})
train(model)
