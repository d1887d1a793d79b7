"""Plain tensors under LocalTensorMode: what one rank's process would have, per simulated rank.

LocalTensorMode (torch 2.13) turns factory ops (`torch.zeros`) into LocalTensors, one value per
rank, but not `torch.tensor(data)` / `torch.as_tensor`: their `aten.lift_fresh` has a plain
tensor argument, so the mode hands back the plain tensor, one object shared by every simulated
rank. An in-place op on it with a per-rank operand then runs once per rank on that one tensor:
`n = torch.tensor(0); n += (labels != -100).sum()` leaves the *sum over all ranks* in `n`, not
each rank's count. TorchTitan's trainer does exactly that for its token count; under FSDP 2 x
TP 2 every rank then divided its loss by 4 x 16 tokens instead of 2 x 16 (loss half the one
device's, docs/numerics.md). Two fixes, both no-ops outside local mode:

- a fresh tensor made from Python data inside the mode is a LocalTensor (every rank its own
  copy), as any other factory's result is;
- an in-place op on a plain tensor (made before the mode, or a module's plain buffer) with a
  per-rank operand runs once per rank on a copy; if every rank got the same value it is written
  back once, else the run is refused in one line: that plain tensor would hold a different
  value on every rank, which one shared object cannot (never rank 0's value for all).
"""

from __future__ import annotations

import torch
import torch.distributed._local_tensor as lt
from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
from torch.utils import _pytree as pytree

from tracer.capture.patches import Patcher
from tracer.capture.recorder import RecordError
from tracer.local import rank_branch
from tracer.local.rank_values import user_site
from tracer.modes import OTHER_MODES


def _plain(t: object) -> bool:
    return type(t) is torch.Tensor or type(t) is torch.nn.Parameter


def install(p: Patcher) -> None:
    """Fresh tensors per rank; in-place writes of per-rank values into a plain tensor checked."""
    orig_dispatch = LocalTensorMode.__torch_dispatch__
    orig_run = lt._for_each_rank_run_func

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (
            func is torch.ops.aten.lift_fresh.default
            and not self._disable
            and not rank_branch.ACTIVE  # rank 0 alone runs a rank-0 branch's ops
            and _plain(args[0])
            and not lt._is_in_fake_tensor_mode()
        ):
            t = args[0]
            return LocalTensor({r: t.clone() for r in sorted(self.ranks)})
        return orig_dispatch(self, func, types, args, kwargs)

    def for_each_rank(func, ranks, args, kwargs, **kw):
        if not (args and _plain(args[0]) and lt._is_inplace_op(func)):
            return orig_run(func, ranks, args, kwargs, **kw)
        if not any(isinstance(a, LocalTensor) for a in pytree.tree_leaves((args, kwargs))):
            return orig_run(func, ranks, args, kwargs, **kw)
        target = args[0]
        per_rank = LocalTensor({r: target.detach().clone() for r in sorted(ranks)})
        orig_run(func, ranks, (per_rank, *args[1:]), kwargs, **kw)
        shards = [per_rank._local_tensors[r] for r in sorted(ranks)]
        if any(not torch.equal(shards[0], s) for s in shards[1:]):
            raise RecordError(
                f"local mode: {user_site(1)} writes a different value on each rank into a plain "
                f"tensor {tuple(target.shape)} that all simulated ranks share ({func}): make it "
                "inside the recorded program (torch.tensor / torch.zeros there give one per rank) "
                f"or record with {OTHER_MODES}"
            )
        with torch.no_grad():
            target.copy_(shards[0])
        return target

    p.set(LocalTensorMode, "__torch_dispatch__", __torch_dispatch__)
    p.set(lt, "_for_each_rank_run_func", for_each_rank)
