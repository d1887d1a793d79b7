"""Seeded deadlock: both ranks do a blocking send first (rendezvous semantics)."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
peer = 1 - dist.get_rank()
dist.send(torch.ones(1024), dst=peer)
dist.recv(torch.empty(1024), src=peer)
