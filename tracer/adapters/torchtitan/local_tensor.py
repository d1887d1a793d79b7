"""TorchTitan in commtrace's local mode, with its own `--comm.mode local_tensor` on or off.

Local mode (`--mode local`) runs every simulated rank in this one process under a
`LocalTensorMode(world_size)` that commtrace opens around the program (tracer/modes/run.py),
and answers the program's rank reads per simulated rank, refusing the uses it cannot carry
(tracer/local/rank_reads.py, rank_values.py, rank_branch.py). Two things in TorchTitan 0.3's
distributed set-up meet that:

- `init_distributed` reads `$RANK` to check it lies in [0, world size) and to hand it to
  `init_process_group("fake", rank=...)`: set-up that holds for every rank, so it runs as the
  framework's own read (`rank_reads.framework_reads`), like torch's;
- its `local_tensor` comm mode asks for a LocalTensorMode itself: `init_fake_mode` initializes
  the "fake" process group and enters a `LocalTensorMode(world_size)` of its own. Two nested
  modes turn every per-rank integer into a per-rank integer of per-rank integers, which torch
  2.13 cannot guard on ("'LocalIntNode' object has no attribute 'guard_int'"). The mode TorchTitan
  asks for is already open over the same ranks, so TorchTitan's request uses it: the process
  group is initialized as TorchTitan does, no second mode is entered, and TorchTitan's
  local-tensor mode on or off records the same run;
- loss parallel (`_LossParallelCrossEntropy.forward`) reads its TP rank to find its vocab shard's
  first id, and its `min(vocab, start + chunk)` compares that per-rank value in Python (ranks
  disagree: a refusal). With a vocabulary that divides evenly by the TP degree every rank takes
  the same branches and shapes (equal shards) and issues the same three TP all-reduces; only the
  shard's bounds differ. There the read runs as the framework's own (every rank computes rank 0's
  bounds [0, chunk)) and each rank's labels are moved into them first, per rank: a label in the
  rank's own shard [r chunk, (r+1) chunk) becomes label - r chunk, any other valid label `chunk`
  (out of range for every rank: its log-probability comes from its owner), IGNORE_INDEX stays.
  Forward and the fused backward then compute each rank's exact values. An uneven split is left
  to the honest-local-mode refusal;
- `Trainer.train` ends with `if dist.get_rank() == 0:` a log line and a 2 s sleep (no
  communication): its own reads are the framework's (`rank_reads.framework_code`).
Outside local mode (no LocalTensorMode open) both functions behave as TorchTitan's own.
"""

from __future__ import annotations

import functools
import inspect


def install() -> None:
    import torch.distributed as dist
    import torchtitan.distributed.utils as tt_dist
    from torch.distributed._local_tensor import local_tensor_mode
    from torchtitan.trainer import Trainer

    from tracer.local.rank_reads import framework_code, framework_reads

    real_fake_mode, real_init = tt_dist.init_fake_mode, tt_dist.init_distributed
    if getattr(real_init, "__commtrace_local__", False):
        return

    @functools.wraps(real_fake_mode)
    def init_fake_mode(world_size: int, comm_mode: str = "fake_backend", *, rank: int = 0) -> None:
        active = local_tensor_mode()
        if comm_mode != "local_tensor" or active is None:
            return real_fake_mode(world_size, comm_mode, rank=rank)
        if active.ranks != frozenset(range(world_size)):
            raise RuntimeError(
                f"comm.mode local_tensor over {world_size} ranks inside a LocalTensorMode over {sorted(active.ranks)}"
            )
        dist.init_process_group("fake", rank=rank, world_size=world_size)

    @functools.wraps(real_init)
    def init_distributed(*args, **kwargs):
        with framework_reads():
            return real_init(*args, **kwargs)

    setattr(init_distributed, "__commtrace_local__", True)  # noqa: B010 - a marker on a wrapper
    tt_dist.init_fake_mode = init_fake_mode
    tt_dist.init_distributed = init_distributed
    framework_code(inspect.unwrap(Trainer.train))  # under its @record wrapper
    _even_loss_parallel(dist, local_tensor_mode, framework_reads)


def _even_loss_parallel(dist, local_tensor_mode, framework_reads) -> None:
    import torch
    from torch.distributed._local_tensor import LocalTensor, maybe_disable_local_tensor_mode
    from torchtitan.components import loss as tt_loss
    from torchtitan.components.loss import IGNORE_INDEX

    from tracer.local.rank_reads import _group_ranks

    fn = getattr(tt_loss, "_LossParallelCrossEntropy", None)
    if fn is None:
        return
    real = fn.forward

    @functools.wraps(real)
    def forward(ctx, logits, labels, tp_group, global_vocab_size, *args, **kwargs):
        even = global_vocab_size % dist.get_world_size(tp_group) == 0
        active = local_tensor_mode()
        if active is None or not even:
            return real(ctx, logits, labels, tp_group, global_vocab_size, *args, **kwargs)
        chunk = global_vocab_size // dist.get_world_size(tp_group)
        # each simulated rank's first vocab id (this file's own rank reads answer rank 0's)
        in_group = _group_ranks(tp_group, max(active.ranks) + 1)
        with maybe_disable_local_tensor_mode():
            start = LocalTensor({r: torch.tensor(chunk * in_group[r]) for r in sorted(active.ranks)})
        own = (labels >= start) & (labels < start + chunk)
        moved = torch.where(own, labels - start, torch.where(labels == IGNORE_INDEX, labels, chunk))
        with framework_reads():  # rank 0's bounds, [0, chunk): each rank's labels are in them now
            return real(ctx, logits, moved, tp_group, global_vocab_size, *args, **kwargs)

    fn.forward = staticmethod(forward)
