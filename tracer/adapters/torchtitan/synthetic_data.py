"""Synthetic tokens in place of TorchTitan's tokenizer and dataset.

A dry run communicates the same whatever the tokens say: only the batch shape (local batch
size x sequence length, per data-parallel rank) and the vocabulary size (the embedding and
output shapes) matter. So the adapter swaps TorchTitan's HuggingFace tokenizer and C4
dataloader, which read files a CPU box does not have, for these two Configurables: uniform
random token ids in [0, vocab_size), different per data-parallel rank, in the batches
TorchTitan's text dataloader yields (`{"input": ids, "positions": 0..seq_len-1}, labels`).

A dp rank's batch is a function of its dp rank `d` and a draw shared by all ranks (as the built-in
workload's, tracer/workloads/train.py): `(base * (d + 1) + 7 d) % vocab`. In local mode `d` is a
per-rank int, so the arithmetic gives every simulated rank its own batch without a per-rank Python
branch, and a numerics twin (`[tracer] twin_of_dp = D`, one rank, local_batch_size x D) takes the
D dp ranks' batches at once, concatenated in dp-rank order: the same global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.components.tokenizer import BaseTokenizer


class SyntheticTokenizer(BaseTokenizer):
    """Token ids without text: TorchTitan asks a tokenizer only for its vocabulary size (and
    hands it to the dataloader, which ignores it here)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        vocab_size: int = 2048
        """Size of the model's vocabulary."""

    def __init__(self, config: Config, **kwargs):
        super().__init__()
        self.vocab_size = config.vocab_size

    def encode(self, text: str, *args, **kwargs) -> list[int]:
        return [b % self.vocab_size for b in text.encode()]

    def decode(self, ids, *args, **kwargs) -> str:
        return " ".join(str(i) for i in ids)

    def get_vocab_size(self) -> int:
        return self.vocab_size


class SyntheticTokens(BaseDataLoader):
    """An endless stream of random token batches for one data-parallel rank."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        vocab_size: int = 2048
        """Token ids are drawn from [0, vocab_size)."""
        seed: int = 0
        """Seed of the draw all data-parallel ranks share (their batches differ by dp rank)."""
        infinite: bool = True
        """Whether the stream never ends (TorchTitan's text dataloaders' field: its validator
        asks for a finite one when `validator.steps = -1`, "consume the whole set")."""
        finite_batches: int = 2
        """How many batches a finite stream yields: a validation set of synthetic tokens has
        no natural length, and each validation step communicates the same."""
        twin_of_dp: int = 0
        """A numerics twin (one rank) of a job with this many dp ranks: yield their batches at once
        (local_batch_size must then be theirs x twin_of_dp); 0: not a twin."""

    def __init__(
        self,
        config: Config,
        *,
        dp_rank: int = 0,
        seq_len: int,
        local_batch_size: int,
        **kwargs,
    ):
        self.vocab_size, self.seq_len, self.batch = (
            config.vocab_size,
            seq_len,
            local_batch_size,
        )
        self.dp_rank, self.twin_of_dp = dp_rank, config.twin_of_dp
        if self.twin_of_dp and local_batch_size % self.twin_of_dp:
            raise ValueError(
                f"a twin of {self.twin_of_dp} dp ranks takes their batches at once: training.local_batch_size "
                f"must be a multiple of {self.twin_of_dp}, got {local_batch_size}"
            )
        self.generator = torch.Generator().manual_seed(config.seed)
        self.batches = 0
        self.limit = None if config.infinite else config.finite_batches

    def __iter__(self):
        positions = torch.arange(self.seq_len).expand(self.batch, self.seq_len)
        dps = range(self.twin_of_dp) if self.twin_of_dp else [self.dp_rank]
        drawn = 0
        while self.limit is None or drawn < self.limit:
            drawn += 1
            base = torch.randint(
                0,
                self.vocab_size,
                (self.batch // len(dps), self.seq_len + 1),
                generator=self.generator,
            )
            tokens = torch.cat([(base * (d + 1) + d * 7) % self.vocab_size for d in dps])
            self.batches += 1
            yield (
                {"input": tokens[:, :-1].contiguous(), "positions": positions.clone()},
                tokens[:, 1:].contiguous(),
            )

    def state_dict(self) -> dict:
        return {"batches": self.batches}

    def load_state_dict(self, state_dict: dict) -> None:
        self.batches = state_dict.get("batches", 0)


def install(config, twin_of_dp: int = 0) -> None:
    """Point a parsed Trainer.Config's tokenizer and dataloaders (training and validation) at
    synthetic tokens of its model's vocabulary size (`twin_of_dp`: SyntheticTokens.Config's)."""
    from torchtitan.models.common.config_utils import decoder_vocab_size

    vocab = decoder_vocab_size(config.model_spec)
    seed = config.debug.seed or 0
    config.tokenizer = SyntheticTokenizer.Config(vocab_size=vocab)
    config.dataloader = SyntheticTokens.Config(vocab_size=vocab, seed=seed, twin_of_dp=twin_of_dp)
    validator = getattr(config, "validator", None)
    if validator is not None and hasattr(validator, "dataloader"):
        validator.dataloader = SyntheticTokens.Config(vocab_size=vocab, seed=seed + 1_000_003)
