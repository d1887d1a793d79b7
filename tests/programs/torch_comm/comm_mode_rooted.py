"""PyTorch's test/distributed/tensor/debug/test_comm_mode.py, test_comm_mode_with_c10d's rooted
list ops (world 2, as the test): gather and scatter, one window each (`window()` steps an empty
optimizer: commtrace's `step` column, the ground truth's window in bench/torch_comm_truth.py).

torch wants the list on the root only ("must NOT be specified on non-destination ranks"), so the
program branches on its rank: fake mode only (local mode runs rank 0's Python for every rank and
refuses a rank-dependent program in one line).
"""
import torch
import torch.distributed as dist
import torch.nn as nn

_marker = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.0)


def window():
    _marker.step()


dist.init_process_group("gloo")
world = dist.get_world_size()
rank = dist.get_rank()
inp = torch.rand(world, 8, 16)
dist.gather(inp, [torch.empty_like(inp) for _ in range(world)] if rank == 0 else None, 0)
window()
dist.scatter(inp, [inp.clone() for _ in range(world)] if rank == 0 else None, 0)
window()
