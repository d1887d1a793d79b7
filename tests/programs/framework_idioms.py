"""Rank reads as the frameworks write them (#38 item 4), in a module the program imports (so its
first `int()` is this module's, not the script's): Lightning's / torchmetrics' module-level
`rank_zero_only` flag and decorator, Accelerate's `get_int_from_env`, its backend test
`int(os.environ.get("LOCAL_RANK", -1)) != -1`, its `is_main_process` property and device list,
torchtune's `_get_local_rank` and guard clause, Lightning's `prepare_data` flags. Every one answers the same on
every rank, or observes on rank 0."""
import os
from functools import wraps

import torch
import torch.distributed as dist


def rank_zero_only(fn, default=None):
    """Lightning's decorator: the function runs on rank 0, the other ranks get `default`."""

    @wraps(fn)
    def wrapped_fn(*args, **kwargs):
        rank = getattr(rank_zero_only, "rank", None)
        if rank is None:
            raise RuntimeError("rank_zero_only.rank needs to be set before use")
        if rank == 0:
            return fn(*args, **kwargs)
        return default

    return wrapped_fn


def _get_rank():
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID"):
        rank = os.environ.get(key)
        if rank is not None:
            return int(rank)
    return None


# module level, at import, as lightning_fabric's and torchmetrics' are (the module's first reads)
LOCAL_RANK_AT_IMPORT = int(os.environ.get("LOCAL_RANK", 0))
rank_zero_only.rank = getattr(rank_zero_only, "rank", _get_rank() or 0)


@rank_zero_only
def rank_zero_info(msg):
    print(msg, flush=True)


def get_int_from_env(env_keys, default):
    """Accelerate's: the first non-negative value of the keys, else the default."""
    for e in env_keys:
        val = int(os.environ.get(e, -1))
        if val >= 0:
            return val
    return default


def backend():
    """Accelerate's `_prepare_backend`: true on every rank of a torchrun job."""
    if int(os.environ.get("LOCAL_RANK", -1)) != -1:
        return "gloo"
    return None


def get_local_rank():
    """torchtune's `_get_local_rank`."""
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is not None:
        local_rank = int(local_rank)
    return local_rank


def warn_once(msg):
    """torchtune's `deprecated` warning: a guard clause the other ranks leave by."""
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if rank != 0:
        return
    print(msg, flush=True)


NODE_RANK = int(os.environ.get("GROUP_RANK", 0))


def prepare_data(state):
    """Lightning's `prepare_data`: rank 0 of the node and of the job kept in names, one through `and`."""
    local_rank_zero = state.local_process_index == 0
    global_rank_zero = state.local_process_index == 0 and NODE_RANK == 0
    if global_rank_zero:
        print("rank 0 prepares the data", flush=True)
    return local_rank_zero


class State:
    """Accelerate's PartialState, its parts that read the rank."""

    def __init__(self):
        self.process_index = dist.get_rank()
        self.local_process_index = get_int_from_env(["LOCAL_RANK", "MPI_LOCALRANKID"], 0)
        self.devices = [torch.device("cpu")] * dist.get_world_size()

    @property
    def is_main_process(self):
        return self.process_index == 0

    @property
    def device(self):
        return self.devices[self.local_process_index]

    def print(self, *args):
        if self.is_main_process:
            print(*args, flush=True)

    def wait_for_everyone(self):
        dist.barrier(device_ids=[self.local_process_index])
