"""#38 item 4: a training loop through the frameworks' rank idioms (framework_idioms.py): the
backend test, a per-rank seed from torchtune's local rank, a batch on Accelerate's device, rank-0
logging through `rank_zero_only`, `is_main_process` and the module-level flag, a barrier on the
rank's own device. Every rank's values are a real run's."""
import os

import torch
import torch.distributed as dist
from framework_idioms import (
    LOCAL_RANK_AT_IMPORT,
    State,
    backend,
    get_local_rank,
    prepare_data,
    rank_zero_info,
    rank_zero_only,
    warn_once,
)

from framework_int import is_launched
from parity_dump import dump

if not is_launched(os.environ.get("LOCAL_RANK", "-1")):
    raise SystemExit("run it with torchrun")

if not dist.is_initialized():
    dist.init_process_group(backend())
state = State()
prepare_data(state)
local_rank = get_local_rank()
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(100 + local_rank)
for step in range(2):
    x = torch.randn(3, 4, device=state.device) + LOCAL_RANK_AT_IMPORT
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    rank_zero_info(f"step {step}")
    warn_once(f"rank 0 only, step {step}")
    if rank_zero_only.rank == 0:
        print("module-level flag says rank 0", flush=True)
    if state.is_main_process:
        print(f"main process at step {step}: loss {loss.item():.4f}", flush=True)
    state.print("done", step)
    dump(f"x{step}", x)
    dump(f"loss{step}", loss)
state.wait_for_everyone()
dump("weight", model.weight)
