"""A hand-written 1F1B pipeline (Megatron's order, blocking send / recv) over pp stages x dp
replicas, 4 microbatches, a dp all-reduce per step; rank = stage * dp + replica.

    pipeline.py [--pp 2] [--batched] [--bug swap|skip|extra]

The steady-state exchanges are ordered so rendezvous sends cannot deadlock (the upstream stage
sends first, the downstream one receives first); --batched posts them as batch_isend_irecv and
waits. Seeded bugs, on the last rank of stage 0 (rank dp - 1): swap: it receives the gradient
before sending the activation in its first steady exchange (a real deadlock with stage 1); skip:
the last stage (rank (pp - 1) * dp + dp - 1) never sends its last microbatch's gradient; extra:
one more dp all-reduce on rank dp - 1.
"""
import argparse

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--pp", type=int, default=2)
ap.add_argument("--batched", action="store_true")
ap.add_argument("--bug", choices=["swap", "skip", "extra"])
a = ap.parse_args()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
pp, m = a.pp, 4
dp = world // pp
stage, d = divmod(rank, dp)
first, last = stage == 0, stage == pp - 1
pp_group = [dist.new_group([s * dp + r for s in range(pp)]) for r in range(dp)][d]
dp_group = [dist.new_group([s * dp + r for r in range(dp)]) for s in range(pp)][stage]
up, down = rank - dp, rank + dp
act = torch.empty(4, 8)
buggy = rank == dp - 1


def send(t, peer):
    dist.send(t, dst=peer, group=pp_group)


def recv(peer):
    dist.recv(act, src=peer, group=pp_group)


def exchange(send_to, recv_from, send_first):
    """A fused send + recv with one peer: blocking in the safe order, or one batch and its waits."""
    if a.batched:
        ops = [dist.P2POp(dist.isend, torch.ones(4, 8), send_to, pp_group),
               dist.P2POp(dist.irecv, act, recv_from, pp_group)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    elif send_first:
        send(torch.ones(4, 8), send_to)
        recv(recv_from)
    else:
        recv(recv_from)
        send(torch.ones(4, 8), send_to)


warm = min(pp - stage - 1, m)
for _ in range(warm):
    if not first:
        recv(up)
    if not last:
        send(torch.ones(4, 8), down)
rest = m - warm
if rest and not first:
    recv(up)
for i in range(rest):
    if not last:  # send_forward_recv_backward
        exchange(down, down, send_first=not (a.bug == "swap" and buggy and i == 0))
    if not first:
        if i == rest - 1:
            if not (a.bug == "skip" and last and rank == world - 1):
                send(torch.ones(4, 8), up)
        else:  # send_backward_recv_forward
            exchange(up, up, send_first=False)
for j in range(warm):
    if not last:
        recv(down)
    if not first:
        send(torch.ones(4, 8), up)
for _ in range(2 if a.bug == "extra" and buggy else 1):
    dist.all_reduce(torch.ones(8), group=dp_group)
