"""Seeded failure with a message of several lines, as a framework's sanity check words it
(DeepSpeed ZeRO-3's list-length check: "Detected a disagreement on list length between rank0
and rankN", then each rank's value on a line of its own): rank 2 holds one parameter more than
rank 0 and raises after the first all_reduce. The values are the evidence: the trace must keep
every line."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
params = list(range(3 + (rank == 2)))
dist.all_reduce(torch.ones(4))
if len(params) != 3:
    raise RuntimeError(
        f"Detected a disagreement on list length between rank0 and rank{rank}\n  rank0: 3\n  rank{rank}: {len(params)}"
    )
dist.all_reduce(torch.ones(4))
