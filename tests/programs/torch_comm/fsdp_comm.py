"""PyTorch's test/distributed/_composable/fsdp/test_fully_shard_comm.py
(TestFullyShardCommunication.test_fully_shard_communication_count, world 4): the test's
Transformer, each TransformerBlock and the root fully_shard-ed, one forward + backward per
reshard_after_forward value. `window()` steps an empty optimizer (commtrace's `step` column, the
ground truth's window in bench/torch_comm_truth.py): case k's set-up is step 2k, what the peer
test runs under CommDebugMode is step 2k + 1.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed._tensor.common_dtensor import ModelArgs, Transformer, TransformerBlock

_marker = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.0)


def window():
    _marker.step()


dist.init_process_group("gloo")
world = dist.get_world_size()
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (world,))

# cases 0 to 3: reshard_after_forward True, False, 2, None. Forward: an all-gather per FSDP unit
# (2 blocks + root). Backward: a reduce-scatter per unit, and the all-gathers of the units that
# resharded (True, 2: all three; None: the blocks, not the root; False: none)
for reshard_after_forward in (True, False, 2, None):
    torch.manual_seed(42)
    model_args = ModelArgs()
    model = Transformer(model_args)
    for module in model.modules():
        if isinstance(module, TransformerBlock):
            fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    torch.manual_seed(42 + rank)
    inp = torch.randint(0, model_args.vocab_size, (2, 16))
    window()
    loss = model(inp)
    loss.sum().backward()
    window()
