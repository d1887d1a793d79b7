"""Ground truth for the torch communication corpus (tests/programs/torch_comm/): run a corpus
script as one rank on torch's own fake process group (as PyTorch's tests do) under torch's own
CommDebugMode, and write every collective CommDebugMode counts as a JSON list of
{"step", "phase", "module", "op"} in program order.

    python bench/torch_comm_truth.py SCRIPT --rank R -n 4 -o OUT.json

Nothing of commtrace runs here: the recorder's counts are compared with these
(tests/record/test_torch_comm_corpus.py). The names are translated to commtrace's vocabulary:
`op` through CDM_OPS (CommDebugMode counts functional collectives by their legacy
`c10d_functional` name and c10d ops by their dispatcher name), `module` from CommDebugMode's
"Root.child.leaf" to commtrace's FQN (the root by its class name, a descendant relative to it,
"" outside any module), `phase` "backward" while autograd runs a backward, else "forward".
`step`: optimizer steps completed before the op (commtrace's `step` column; the corpus scripts
step an empty optimizer to mark their windows).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys

import torch
import torch.distributed as dist
from torch.distributed.tensor.debug import CommDebugMode
from torch.nn.modules.module import register_module_forward_hook
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.testing._internal.distributed.fake_pg import FakeStore

from traceformat.ops import OPS

# CommDebugMode's key (str of the op overload packet) -> commtrace's op (traceformat/ops.py)
CDM_OPS = {
    "c10d_functional.all_reduce": "all_reduce",
    "c10d_functional.all_reduce_coalesced": "all_reduce_coalesced",
    "c10d_functional.all_gather_into_tensor": "all_gather_into_tensor",
    "c10d_functional.all_gather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "c10d_functional.reduce_scatter_tensor": "reduce_scatter_tensor",
    "c10d_functional.reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "c10d_functional.all_to_all_single": "all_to_all_single",
    "c10d_functional.broadcast": "broadcast",
    "_dtensor.shard_dim_alltoall": "all_to_all_single",
    "c10d.allreduce_": "all_reduce",
    "c10d.allreduce_coalesced_": "all_reduce_coalesced",
    "c10d.allgather_": "all_gather",
    "c10d.allgather_coalesced_": "all_gather_coalesced",
    "c10d._allgather_base_": "all_gather_into_tensor",
    "c10d.allgather_into_tensor_coalesced_": "all_gather_into_tensor_coalesced",
    "c10d.reduce_scatter_": "reduce_scatter",
    "c10d._reduce_scatter_base_": "reduce_scatter_tensor",
    "c10d.reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced",
    "c10d.broadcast_": "broadcast",
    "c10d.reduce_": "reduce",
    "c10d.gather_": "gather",
    "c10d.scatter_": "scatter",
    "c10d.alltoall_": "all_to_all",
    "c10d.alltoall_base_": "all_to_all_single",
}
assert set(CDM_OPS.values()) <= set(OPS), "every op CommDebugMode counts is in commtrace's op table"
COUNTED = frozenset(CDM_OPS.values())
"""The ops CommDebugMode counts (it leaves out barrier, send and recv)."""


def module_name(cdm: str) -> str:
    """CommDebugMode's "Root.a.b" -> commtrace's "a.b"; "Root" stays; "Global" -> ""."""
    if cdm == "Global":
        return ""
    return cdm.split(".", 1)[1] if "." in cdm else cdm


class LoggingCommDebugMode(CommDebugMode):
    """CommDebugMode that also keeps each counted collective in order, with the module and
    direction CommDebugMode itself files it under."""

    def __init__(self):
        super().__init__()
        self.step = 0
        self.log: list[dict] = []
        # CommDebugMode keeps the last module's name after the module returns (an op between two
        # forwards, a DTensor set-up, would be filed under it): an op is inside a module while
        # ModTracker holds one, or while a module that returned still runs its own forward hooks
        # (CommDebugMode's per-call hook, registered after TP's, closes that span)
        self.closing: set[int] = set()
        tracker = self.advanced_module_tracker
        set_module = tracker._fw_set_module_hook

        def closed(mod, inp, out):
            self.closing.discard(id(mod))
            return set_module(mod, inp, out)

        tracker._fw_set_module_hook = closed

    def returned(self, mod, inp, out) -> None:
        self.closing.add(id(mod))

    def inside(self) -> bool:
        tracker = self.advanced_module_tracker
        return tracker.is_bw or len(tracker.parents) > 1 or bool(self.closing)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = dict(self.comm_counts)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        for key, count in self.comm_counts.items():  # the key CommDebugMode counted it under
            if count == before.get(key, 0):
                continue
            tracker = self.advanced_module_tracker
            self.log.append(
                {
                    "step": self.step,
                    "phase": "backward" if tracker.is_bw else "forward",
                    "module": module_name(tracker.name) if self.inside() else "",
                    "op": CDM_OPS[str(key)],
                }
            )
        return out


def run(script: str, rank: int, world: int) -> list[dict]:
    real_init = dist.init_process_group

    def fake_init(*args, **kwargs):  # the script's backend -> torch's fake one, this rank of `world`
        real_init(backend="fake", store=FakeStore(), rank=rank, world_size=world)

    dist.init_process_group = fake_init
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    mode = LoggingCommDebugMode()

    def stepped(*_):
        mode.step += 1

    handle = register_optimizer_step_post_hook(stepped)
    returned = register_module_forward_hook(mode.returned, always_call=True)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        with mode:
            runpy.run_path(script, run_name="__main__")
    finally:
        handle.remove()
        returned.remove()
        dist.init_process_group = real_init
        if dist.is_initialized():
            dist.destroy_process_group()
    return mode.log


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("script")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("-n", "--world-size", type=int, default=4)
    p.add_argument("-o", "--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    log = run(a.script, a.rank, a.world_size)
    with open(a.out, "w") as f:
        json.dump(log, f)


if __name__ == "__main__":
    main()
