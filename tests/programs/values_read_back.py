"""Values a program reads back from small collectives, as frameworks read them: each rank writes
what it got to OUT/rank_R.json (the test compares them with the values worked out by hand).
`--bug rank0-extra`: rank 0 alone all-reduces a flag (the others never issue it)."""
import argparse
import json
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--bug", default="")
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
got = {}

length = torch.tensor(3 if rank == 0 else -1)  # DeepSpeed ZeRO-3's list length check
dist.broadcast(length, src=0)
got["broadcast_length"] = length.item()

decision = torch.tensor(int(rank != 2))  # Lightning's reduce_boolean_decision
dist.all_reduce(decision)
got["all_ranks_agree"] = bool(decision == world)

for op in ("MAX", "MIN", "PRODUCT"):
    t = torch.tensor([rank + 1.0, 10.0 - rank])
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    got[op.lower()] = t.tolist()

flags = torch.tensor([1 << rank], dtype=torch.int32)
dist.all_reduce(flags, op=dist.ReduceOp.BOR)
got["bor"] = flags.item()

sizes = torch.empty(world, dtype=torch.int64)  # Accelerate's pad_across_processes
dist.all_gather_into_tensor(sizes, torch.tensor([5 + rank]))
got["max_size"] = sizes.max().item()

if args.bug == "rank0-extra" and rank == 0:
    dist.all_reduce(torch.ones(1))

tokens = torch.tensor(7 * (rank + 1))  # torchtune's token count
dist.all_reduce(tokens)
got["tokens"] = tokens.item()

parts = [torch.zeros(2) for _ in range(world)] if rank == 1 else None
dist.gather(torch.full((2,), float(rank)), parts, dst=1)
got["gathered_on_1"] = [p.tolist() for p in parts] if parts else None

mine = torch.zeros(1)
dist.scatter(mine, [torch.tensor([100.0 + r]) for r in range(world)] if rank == 3 else None, src=3)
got["scattered"] = mine.item()

big = torch.full((1024,), float(rank))  # 4 KiB: mirrored, each rank keeps its own data
dist.all_reduce(big)
got["big"] = big[0].item()

with open(os.path.join(args.out, f"rank_{rank}.json"), "w") as f:
    json.dump(got, f)
