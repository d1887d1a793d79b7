"""The real-run side of tests/record/test_local_parity.py: every named parity_*.py program run as
__main__ in one torchrun (one process group, so the world starts once), each dumping to OUT/NAME.
Usage: torchrun --standalone --nproc-per-node 4 parity_all.py OUT NAME..."""
import os
import runpy
import sys

import torch.distributed as dist

here = os.path.dirname(os.path.abspath(__file__))
out, names = sys.argv[1], sys.argv[2:]
init = dist.init_process_group


def init_once(*args, **kwargs):
    if not dist.is_initialized():
        init(*args, **kwargs)


dist.init_process_group = init_once
for name in names:
    os.environ["PARITY_DIR"] = os.path.join(out, name)
    os.makedirs(os.environ["PARITY_DIR"], exist_ok=True)
    runpy.run_path(os.path.join(here, name + ".py"), run_name="__main__")
    dist.barrier()
dist.destroy_process_group()
