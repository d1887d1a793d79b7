"""Three all_reduces, then hangs (a dead rank in compute): for SIGKILL / timeout tests."""
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
for _ in range(3):
    dist.all_reduce(torch.ones(2))
time.sleep(600)
