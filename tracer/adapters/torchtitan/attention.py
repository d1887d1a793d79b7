"""TorchTitan's FlexAttention, computed in plain eager math on a CPU.

TorchTitan 0.3's language models attend through `FlexAttention._compiled_flex_attn`, a
`torch.compile`d `flex_attention` with block-causal document masks; torch's flex attention has
no backward on CPU ("FlexAttention does not support backward on CPU"). Attention is local
math, it never communicates, so the adapter swaps that one callable for `math_flex_attention`:
the same inputs and outputs (out, and the log-sum-exp when asked), the mask materialized from
the BlockMask's own mask_mod, softmax(q k^T * scale) v with autograd. The BlockMask itself is
built eagerly (no torch.compile). TP / CP / FSDP around it
are TorchTitan's, untouched.
"""

from __future__ import annotations

import math

import torch
from torch.nn.attention.flex_attention import AuxOutput, create_mask


def math_flex_attention(
    q,
    k,
    v,
    *,
    score_mod=None,
    block_mask=None,
    scale=None,
    enable_gqa=False,
    return_aux=None,
    kernel_options=None,
    **kwargs,
):
    """flex_attention(q, k, v) for (B, N, L, H) inputs, eagerly, with autograd on any device."""
    if score_mod is not None:
        raise NotImplementedError("the CPU attention of the TorchTitan adapter has no score_mod support")
    B, Hq, L, D = q.shape
    S, Hkv = k.shape[-2], k.shape[1]
    if Hq != Hkv:  # grouped-query attention: each kv head serves Hq / Hkv query heads
        k = k.repeat_interleave(Hq // Hkv, dim=1)
        v = v.repeat_interleave(Hq // Hkv, dim=1)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)).float() * scale
    if block_mask is not None:
        mb = block_mask.shape[0] if block_mask.shape[0] == B else None  # batch-broadcast masks: 1
        mask = create_mask(block_mask.mask_mod, mb, None, L, S, device=q.device)
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), v)
    want_lse = return_aux is not None and return_aux.lse
    return out, AuxOutput(lse=lse if want_lse else None)


def install() -> None:
    """Route TorchTitan's FlexAttention through math_flex_attention (a class attribute: every
    FlexAttention module reads it at call time), and build its masks eagerly: TorchTitan
    compiles `create_block_mask` too, ~15 s of dynamo per rank for a mask that is cheap here."""
    from torch.nn.attention.flex_attention import create_block_mask
    from torchtitan.models.common import attention as tt_attention

    tt_attention.FlexAttention._compiled_flex_attn = staticmethod(math_flex_attention)
    tt_attention._compiled_create_block_mask = create_block_mask
