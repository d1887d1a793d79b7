"""TorchTitan's FlexAttention, computed in plain eager math on a CPU.

TorchTitan 0.3's language models attend through `FlexAttention._compiled_flex_attn`, a
`torch.compile`d `flex_attention` with block-causal document masks; torch's flex attention has
no backward on CPU ("FlexAttention does not support backward on CPU"). Attention is local
math, it never communicates, so the adapter swaps that one callable for `math_flex_attention`:
the same inputs and outputs (out, and the log-sum-exp when asked), the mask materialized from
the BlockMask's own mask_mod, softmax(q k^T * scale) v with autograd. The BlockMask itself is
built eagerly (no torch.compile). VarlenAttention's `varlen_attn` (flash attention over packed
documents, CUDA only) likewise: `math_varlen_attn`. TP / CP / FSDP around it
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


def math_varlen_attn(
    query,
    key,
    value,
    cu_seq_q,
    cu_seq_k,
    max_q,
    max_k,
    *,
    return_aux=None,
    scale=None,
    window_size=(-1, -1),
    enable_gqa=False,
    **kwargs,
):
    """torch's `varlen_attn` (flash attention over packed documents, CUDA only) in eager math:
    (T, H, D) inputs, documents cut at `cu_seq_*`, `window_size` (left, right) as flash reads it
    ((-1, 0): causal); the log-sum-exp (T, H) when asked. Attention never communicates."""
    T, Hq, D = query.shape
    S, Hkv = key.shape[0], key.shape[1]
    if Hq != Hkv:
        key = key.repeat_interleave(Hq // Hkv, dim=1)
        value = value.repeat_interleave(Hq // Hkv, dim=1)
    cu_k = cu_seq_q if cu_seq_k is None else cu_seq_k

    def docs(n: int, cu):
        idx = torch.arange(n, device=query.device)
        doc = torch.searchsorted(cu[1:].to(idx.device), idx, right=True)
        return doc, idx - cu.to(idx.device)[doc]

    doc_q, pos_q = docs(T, cu_seq_q)
    doc_k, pos_k = docs(S, cu_k)
    mask = doc_q[:, None] == doc_k[None, :]
    left, right = window_size
    if left >= 0:
        mask &= pos_q[:, None] - pos_k[None, :] <= left
    if right >= 0:
        mask &= pos_k[None, :] - pos_q[:, None] <= right
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    scores = torch.einsum("thd,shd->hts", query, key).float() * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (H, T)
    out = torch.einsum("hts,shd->thd", torch.softmax(scores, dim=-1).to(value.dtype), value)
    if return_aux is not None and getattr(return_aux, "lse", False):
        return out, lse.transpose(0, 1)
    return out


def install() -> None:
    """Route TorchTitan's FlexAttention through math_flex_attention (a class attribute: every
    FlexAttention module reads it at call time), and build its masks eagerly: TorchTitan
    compiles `create_block_mask` too, ~15 s of dynamo per rank for a mask that is cheap here."""
    from torch.nn.attention.flex_attention import create_block_mask
    from torchtitan.models.common import attention as tt_attention

    tt_attention.FlexAttention._compiled_flex_attn = staticmethod(math_flex_attention)
    tt_attention.varlen_attn = math_varlen_attn  # VarlenAttention calls it by this module-level name
    tt_attention._compiled_create_block_mask = create_block_mask
