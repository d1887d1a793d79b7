"""Rank 1 waits for an object that rank 0 never sends (rank 0 skips its send_object_list)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
if dist.get_rank() == 1:
    box = [None]
    dist.recv_object_list(box, src=0)  # rank 0 has no matching send
    dist.all_reduce(torch.ones(box[0]))
