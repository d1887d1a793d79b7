"""Synthetic tokens in place of TorchTitan's tokenizer and dataset.

A dry run communicates the same whatever the tokens say: only the batch shape (local batch
size x sequence length, per data-parallel rank) and the vocabulary size (the embedding and
output shapes) matter. So the adapter swaps TorchTitan's HuggingFace tokenizer and C4
dataloader, which read files a CPU box does not have, for these two Configurables: uniform
random token ids in [0, vocab_size), seeded per data-parallel rank, in the batches TorchTitan's
text dataloader yields (`{"input": ids, "positions": 0..seq_len-1}, labels`).
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
        """Base seed; each data-parallel rank draws from seed + its dp rank."""
        infinite: bool = True
        """Whether the stream never ends (TorchTitan's text dataloaders' field: its validator
        asks for a finite one when `validator.steps = -1`, "consume the whole set")."""
        finite_batches: int = 2
        """How many batches a finite stream yields: a validation set of synthetic tokens has
        no natural length, and each validation step communicates the same."""

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
        # in local mode dp_rank is a per-rank symbolic int (LocalTensor runs every rank at once):
        # the draw is then LocalTensorMode's own, per rank; a generator needs a plain int
        self.generator = torch.Generator().manual_seed(config.seed + (dp_rank if isinstance(dp_rank, int) else 0))
        self.batches = 0
        self.limit = None if config.infinite else config.finite_batches

    def __iter__(self):
        positions = torch.arange(self.seq_len).expand(self.batch, self.seq_len)
        drawn = 0
        while self.limit is None or drawn < self.limit:
            drawn += 1
            tokens = torch.randint(
                0,
                self.vocab_size,
                (self.batch, self.seq_len + 1),
                generator=self.generator,
            )
            self.batches += 1
            yield (
                {"input": tokens[:, :-1].contiguous(), "positions": positions.clone()},
                tokens[:, 1:].contiguous(),
            )

    def state_dict(self) -> dict:
        return {"batches": self.batches}

    def load_state_dict(self, state_dict: dict) -> None:
        self.batches = state_dict.get("batches", 0)


def install(config) -> None:
    """Point a parsed Trainer.Config's tokenizer and dataloaders (training and validation) at
    synthetic tokens of its model's vocabulary size."""
    from torchtitan.models.common.config_utils import decoder_vocab_size

    vocab = decoder_vocab_size(config.model_spec)
    seed = config.debug.seed or 0
    config.tokenizer = SyntheticTokenizer.Config(vocab_size=vocab)
    config.dataloader = SyntheticTokens.Config(vocab_size=vocab, seed=seed)
    validator = getattr(config, "validator", None)
    if validator is not None and hasattr(validator, "dataloader"):
        validator.dataloader = SyntheticTokens.Config(vocab_size=vocab, seed=seed + 1_000_003)
