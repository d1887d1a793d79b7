"""Seeded bug: on a 2 x 2 (dp, tp) mesh of 4 ranks, an all_to_all_single on each 2-rank group in
which every rank sends 2 rows to each member and expects 2 from each, but rank 3 sends 3 rows to
its peer (and 1 to itself, which it expects).

By hand, per group: tp {2, 3}: 2->3 sends 2, expected 2 (fine); 3->2 sends 3, expected 2 (bad);
3->3 sends 1, expected 1 (fine). The one bad pair names rank 3 and rank 2 once each: a tie.
dp {1, 3}: the same with rank 1. Groups {0, 1} and {0, 2} are fine. Across groups, rank 3 is
named by both ties: the culprit of both."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
for name in ("tp", "dp"):
    group = mesh.get_group(name)
    me = dist.get_group_rank(group, dist.get_rank())
    send = [2, 2]
    if dist.get_rank() == 3:
        send = [1, 1]
        send[1 - me] = 3  # 3 rows to the peer, 1 to itself
    expect = [2, 2]
    if dist.get_rank() == 3:
        expect[me] = 1
    dist.all_to_all_single(
        torch.empty(sum(expect), 4),
        torch.ones(sum(send), 4),
        output_split_sizes=expect,
        input_split_sizes=send,
        group=group,
    )
