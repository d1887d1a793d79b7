"""PyTorch's test/distributed/tensor/parallel/test_tp_examples.py (world 4), one window per case.
`window()` steps an empty optimizer (commtrace's `step` column, the ground truth's window in
bench/torch_comm_truth.py): case k's set-up is step 2k, what the peer test runs under
CommDebugMode is step 2k + 1 (the transformer cases end it with their own optimizer step).
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import DeviceMesh, DTensor, Shard, distribute_tensor
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, loss_parallel, parallelize_module
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
rank = dist.get_rank()
device_mesh = DeviceMesh("cpu", torch.arange(0, world))

# cases 0, 1 (test_mlp_training, _test_mlp_training_e2e): MLP forward + backward, plain TP: one
# all_reduce; sequence parallel: 2 all_gather, 1 reduce_scatter
for is_seq_parallel in (False, True):
    torch.manual_seed(rank if is_seq_parallel else 0)
    inp = torch.rand(8, 10)
    plan = {
        "net1": ColwiseParallel(input_layouts=Shard(0)) if is_seq_parallel else ColwiseParallel(),
        "net2": RowwiseParallel(output_layouts=Shard(0)) if is_seq_parallel else RowwiseParallel(),
    }
    model_tp = parallelize_module(MLPModule("cpu"), device_mesh, plan)
    window()
    output_tp = model_tp(inp)
    output_tp.sum().backward()
    window()

# cases 2, 3 (test_transformer_training, float32, one step): forward, backward, then Adam's step
# under implicit_replication (sequence parallel: 30 all_reduce of the replicated norms' grads)
for is_seq_parallel in (False, True):
    model_args = ModelArgs(dropout_p=0.0)
    model_tp = Transformer.parallelize(Transformer(model_args), device_mesh, is_seq_parallel)
    optim_tp = torch.optim.Adam(model_tp.parameters(), lr=0.25)
    torch.manual_seed(0)
    inp = torch.randint(model_args.vocab_size, [8, 8])
    window()
    output_tp = model_tp(inp)
    output_tp.sum().backward()
    with implicit_replication():
        optim_tp.step()  # ends the window

# case 4 (test_loss_parallel): cross_entropy of a class-sharded input under loss_parallel,
# reduction "mean", with a weight: 3 all_reduce forward, nothing backward
torch.manual_seed(0)
weight = torch.rand(16)
x = torch.rand(8, 16, requires_grad=True)
target = torch.randint(16, (8,))
dist_x = distribute_tensor(x, device_mesh, [Shard(1)])
window()
with loss_parallel():
    dist_y = F.cross_entropy(dist_x, target, weight, reduction="mean")
    dist_y.backward()
window()
