"""Ranks 0 and 1 each wait for the other's object first: a real run hangs; recorded with
--timeout, both fail after it, each naming the rank it waits for."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
me = dist.get_rank()
peer = 1 - me
box = [None]
dist.recv_object_list(box, src=peer)
dist.send_object_list([me], dst=peer)
