"""The training loss, as TorchTitan 0.3 computes it (torchtitan/components/loss.py).

With tensor parallel and loss parallel on (TorchTitan's default; `disable_loss_parallel` turns
it off) the logits stay sharded on the vocab dim: no all-gather of the full logits. The
cross-entropy then takes three tp all-reduces in forward (the row max, the sum of exps, the
target's log-probability, each one float per token) and none in backward (the gradient is
local to the shard): TorchTitan's _LossParallelCrossEntropy.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F


def _vocab_start(group: dist.ProcessGroup, chunk: int, vocab: int) -> int | torch.Tensor:
    """The first vocab id of this rank's logit shard. In local mode one Python runs every rank,
    so `dist.get_rank(group)` would be rank 0's answer for all: there the start is a per-rank
    LocalTensor scalar (each simulated rank's position in its own sibling group)."""
    from torch.distributed._local_tensor import local_tensor_mode

    mode = local_tensor_mode()
    if mode is None:
        return min(vocab, chunk * dist.get_rank(group))
    from torch.distributed._local_tensor._c10d import _prepare_collective_groups

    ranks, offsets, _ = _prepare_collective_groups(group)
    position = {offset + r: i for offset in offsets for i, r in enumerate(ranks)}
    return mode.rank_map(lambda g: torch.tensor(min(vocab, chunk * position[g])))


class LossParallelCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of (tokens, vocab / tp) logit shards; labels are global ids."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, group: dist.ProcessGroup, vocab: int):
        size = dist.get_world_size(group)
        chunk = (vocab + size - 1) // size
        start = _vocab_start(group, chunk, vocab)
        local_max = funcol.all_reduce(logits.amax(-1, keepdim=True), reduceOp="max", group=group)
        shifted = logits - local_max
        sumexp = funcol.all_reduce(shifted.exp().sum(-1, keepdim=True), reduceOp="sum", group=group)
        log_probs = shifted - sumexp.log()
        outside = (labels < start) | (labels >= start + logits.shape[-1])
        local_labels = torch.where(outside, 0, labels - start)
        picked = torch.where(outside.unsqueeze(-1), 0.0, log_probs.gather(-1, local_labels.unsqueeze(-1)))
        picked = funcol.all_reduce(picked, reduceOp="sum", group=group)
        ctx.save_for_backward(log_probs, local_labels, outside)
        return -picked.sum()

    @staticmethod
    def backward(ctx, grad):
        log_probs, local_labels, outside = ctx.saved_tensors
        g = log_probs.exp()
        onehot = F.one_hot(local_labels, g.shape[-1]).to(g.dtype) * (~outside).unsqueeze(-1).to(g.dtype)
        return (g - onehot) * grad, None, None, None


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, tp_group: dist.ProcessGroup | None,
                  vocab: int, tokens: torch.Tensor | int | None = None) -> torch.Tensor:
    """Cross-entropy summed over tokens and divided by `tokens`: the global token count over the
    data-parallel ranks (TorchTitan's normalisation: FSDP then sums gradients, division off),
    by default this rank's own count. `tp_group` set: `logits` hold this rank's vocab shard."""
    flat, target = logits.flatten(0, 1).float(), labels.flatten(0, 1)
    total = target.numel() if tokens is None else tokens
    if tp_group is None:
        return F.cross_entropy(flat, target, reduction="sum") / total
    return LossParallelCrossEntropy.apply(flat, target, tp_group, vocab) / total
