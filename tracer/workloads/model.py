"""A small Llama-style transformer in TorchTitan's layout: RMSNorm, rotary attention with GQA,
SwiGLU, optionally an MoE feed-forward (top-k router, grouped experts).

The module names match TorchTitan's llama3 (`tok_embeddings`, `layers.<i>.attention.wq`, ...,
`norm`, `output`) so that parallelization plans and recorded module FQNs read the same. `layers`
is a ModuleDict so that pipeline splitting can delete blocks without renaming the rest.
Every module tolerates being None (`tok_embeddings`, `norm`, `output`), as a pipeline stage
holds only its share of the model.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from tracer.config import Model as ModelArgs


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(head_dim: int, seq_len: int, theta: float) -> torch.Tensor:
    """cos and sin of the rotary angles, (seq_len, head_dim) each, stacked: real tensors rather
    than TorchTitan's complex freqs_cis, which keeps every op plain for LocalTensor."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len).float(), freqs)
    return torch.stack([angles.cos(), angles.sin()])


def apply_rotary(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """x: (bs, seq, heads, head_dim); rotate interleaved pairs."""
    cos, sin = rope[0][: x.shape[1]][None, :, None, :], rope[1][: x.shape[1]][None, :, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    # computed in the tables' float32, returned in x's dtype (bf16 under mixed precision), as TorchTitan does
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2).type_as(x)


class Attention(nn.Module):
    """wq / wk / wv, or (fuse_qkv, TorchTitan 0.3's llama3) one wqkv whose output splits into
    q, k and v in the ratio of their head counts. Under tensor parallel a colwise shard of wqkv
    holds n_heads / tp + 2 kv_heads / tp heads' worth of rows: the same split, per rank (a
    re-parameterisation of the unfused layer, whose collectives it issues one for three)."""

    def __init__(self, a: ModelArgs):
        super().__init__()
        self.head_dim = a.head_dim
        self.heads = (a.n_heads, a.kv_heads, a.kv_heads)
        if a.fuse_qkv:
            self.wqkv = nn.Linear(a.dim, sum(self.heads) * a.head_dim, bias=False)
        else:
            self.wq = nn.Linear(a.dim, a.n_heads * a.head_dim, bias=False)
            self.wk = nn.Linear(a.dim, a.kv_heads * a.head_dim, bias=False)
            self.wv = nn.Linear(a.dim, a.kv_heads * a.head_dim, bias=False)
        self.wo = nn.Linear(a.n_heads * a.head_dim, a.dim, bias=False)

    def qkv(self, x):
        if not hasattr(self, "wqkv"):
            return self.wq(x), self.wk(x), self.wv(x)
        out = self.wqkv(x)
        unit = out.shape[-1] // sum(self.heads)  # head_dim / tp: the rows per head this rank holds
        return out.split([h * unit for h in self.heads], dim=-1)

    def forward(self, x, rope):
        bs, seq, _ = x.shape
        # -1 heads: under tensor parallel each rank holds n_heads / tp of them
        q, k, v = (t.reshape(bs, seq, -1, self.head_dim) for t in self.qkv(x))
        q, k = apply_rotary(q, rope), apply_rotary(k, rope)
        repeat = q.shape[2] // k.shape[2]  # grouped-query attention: share each kv head
        k, v = k.repeat_interleave(repeat, dim=2), v.repeat_interleave(repeat, dim=2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(bs, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GroupedExperts(nn.Module):
    """n_experts SwiGLUs as three stacked weights (TorchTitan's layout), so expert parallel can
    shard dim 0 and FSDP can shard what is left."""

    def __init__(self, dim: int, hidden: int, n_experts: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(n_experts, hidden, dim) * dim ** -0.5)
        self.w2 = nn.Parameter(torch.randn(n_experts, dim, hidden) * hidden ** -0.5)
        self.w3 = nn.Parameter(torch.randn(n_experts, hidden, dim) * dim ** -0.5)

    def forward(self, x: torch.Tensor, expert_ids: torch.Tensor) -> torch.Tensor:
        """x: (tokens, dim); expert_ids: (tokens,) local expert of each token.
        Gathers each token's expert weights instead of looping over experts: no Python-level
        slicing by data-dependent sizes, so it runs unchanged under LocalTensorMode, where
        every rank's token count differs. Fine for the tiny models a dry run uses."""
        w1, w2, w3 = (_local(w) for w in (self.w1, self.w2, self.w3))
        # broadcast-multiply-sum rather than einsum/bmm: those refuse per-rank symbolic sizes
        x = x.unsqueeze(1)
        h = F.silu((x * w1[expert_ids]).sum(-1)) * (x * w3[expert_ids]).sum(-1)
        return (h.unsqueeze(1) * w2[expert_ids]).sum(-1)


def _local(w):
    """Expert parallel makes the expert weights DTensors sharded on the ep dim; each rank
    computes with its own experts (TorchTitan does the same inside its expert-parallel hooks)."""
    return w.to_local() if hasattr(w, "to_local") else w


class MoE(nn.Module):
    """Top-k routing over grouped experts. `dispatch` is replaced by expert parallel with an
    all_to_all exchange; without it every expert is local."""

    def __init__(self, a: ModelArgs, hidden: int):
        super().__init__()
        self.n_experts, self.top_k = a.n_experts, a.top_k
        self.router = nn.Linear(a.dim, a.n_experts, bias=False)
        self.experts = GroupedExperts(a.dim, hidden, a.n_experts)
        self.ep_group = None  # set by expert_parallel.apply

    def forward(self, x):
        bs, seq, dim = x.shape
        tokens = x.reshape(-1, dim)
        probs, chosen = torch.topk(F.softmax(self.router(tokens), dim=-1), self.top_k, dim=-1)
        flat = chosen.flatten()
        order = torch.argsort(flat, stable=True)  # group (token, choice) pairs by expert
        counts = torch.bincount(flat, minlength=self.n_experts)
        routed = tokens.repeat_interleave(self.top_k, dim=0)[order]
        if self.ep_group is None:
            out = self.experts(routed, flat[order])
        else:
            from tracer.workloads.expert_parallel import dispatch_and_combine

            out = dispatch_and_combine(self, routed, counts)
        out = out[torch.argsort(order)].view(-1, self.top_k, dim)
        return (out * probs.unsqueeze(-1)).sum(1).view(bs, seq, dim)


class TransformerBlock(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.attention_norm = RMSNorm(a.dim, a.norm_eps)
        self.attention = Attention(a)
        self.ffn_norm = RMSNorm(a.dim, a.norm_eps)
        if a.n_experts:
            self.moe = MoE(a, a.hidden_dim)
        else:
            self.feed_forward = FeedForward(a.dim, a.hidden_dim)

    def forward(self, x, rope):
        h = x + self.attention(self.attention_norm(x), rope)
        ffn = self.moe if hasattr(self, "moe") else self.feed_forward
        return h + ffn(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, a: ModelArgs, seq_len: int):
        super().__init__()
        self.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
        self.register_buffer("rope", rotary_tables(a.head_dim, seq_len, a.rope_theta), persistent=False)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(a) for i in range(a.n_layers)})
        self.norm = RMSNorm(a.dim, a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab_size, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h, self.rope)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h
