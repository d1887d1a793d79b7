"""PyTorch's test/distributed/tensor/debug/test_comm_mode_features.py (world 4), the two
module-tracing cases, on the test's own models. `window()` steps an empty optimizer
(commtrace's `step` column, the ground truth's window in bench/torch_comm_truth.py): case k's
set-up is step 2k, what the peer test runs under CommDebugMode is step 2k + 1.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DeviceMesh, DTensor, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.testing._internal.distributed._tensor.common_dtensor import MLPModule, ModelArgs, Transformer



def _math_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Attention in plain aten ops: DTensor has no sharding rule for the fused CPU kernel (the peer
    test runs on GPUs). Head-sharded q, k, v: each rank attends over its own heads, as DTensor's
    rule for the GPU kernels does (no collective)."""
    if isinstance(q, DTensor):
        out = _math_sdpa(q.to_local(), k.to_local(), v.to_local(), attn_mask, dropout_p, is_causal, scale)
        return DTensor.from_local(out, q.device_mesh, q.placements)
    scores = q @ k.transpose(-2, -1) * (scale or q.size(-1) ** -0.5)
    if is_causal:
        scores = scores.masked_fill(torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


torch.nn.functional.scaled_dot_product_attention = _math_sdpa
_marker = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.0)


def window():
    _marker.step()


dist.init_process_group("gloo")
world = dist.get_world_size()
device_mesh = DeviceMesh("cpu", torch.arange(0, world))

# case 0 (test_MLP_module_tracing): net2's RowwiseParallel output all_reduce, forward, filed under
# MLPModule.net2 (and its parents)
torch.manual_seed(0)
inp = torch.rand(8, 10)
model = parallelize_module(MLPModule("cpu"), device_mesh, {"net1": ColwiseParallel(), "net2": RowwiseParallel()})
window()
output_tp = model(inp)
output_tp.sum().backward()
window()

# case 1 (test_transformer_module_tracing): the test's Transformer under Transformer.parallelize,
# forward only: 6 all_reduce + 1 all_gather, each under its leaf
model2 = Transformer(ModelArgs(dropout_p=0.0))
model2 = Transformer.parallelize(model2, device_mesh, False)
inp = distribute_tensor(torch.randint(ModelArgs().vocab_size, [8, 8]), device_mesh=device_mesh)
window()
model2(inp)
window()
