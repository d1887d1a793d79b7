"""Async Work objects and their futures, used the way DDP comm hooks and overlap code use them.

Every check is an assert: the program fails (and the recording with it) if a Work or future does
not behave as a real one would. SPMD: same calls on every rank.
"""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world = dist.get_world_size()

x = torch.ones(4)
work = dist.all_reduce(x, async_op=True)
fut = work.get_future()
assert fut.done()
(reduced,) = fut.value()
assert reduced.shape == (4,) and torch.equal(reduced, x)  # the output tensor (all-reduce is in place)
doubled = fut.then(lambda f: f.value()[0] * 2).then(lambda f: f.value() + 1)  # chains run
assert torch.equal(doubled.wait(), x * 2 + 1)
assert work.wait() is True and work.is_completed() and work.is_success()
assert torch.equal(work.result()[0], x)

out = torch.empty(4 * world)
gathered = dist.all_gather_into_tensor(out, torch.full((4,), 2.0), async_op=True).get_future()
assert gathered.wait()[0].shape == (4 * world,)


def boom(f):
    raise ValueError("raised in a callback")


failing = dist.all_reduce(torch.ones(2), async_op=True).get_future().then(boom)
try:
    failing.wait()
except RuntimeError as e:  # torch wraps it: "Got the following error when running the callback: ..."
    assert "ValueError: raised in a callback" in str(e)
else:
    raise AssertionError("a callback's exception did not propagate to wait()")
