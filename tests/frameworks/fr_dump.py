"""Run a program under torchrun with gloo's Flight Recorder on and dump every rank's buffer when it
ends (gloo has no dump of its own), for `analyzer` to compare with a recording:

    FR_OUT=dumps DS_ACCELERATOR=cpu torchrun --nproc-per-node 4 tests/frameworks/fr_dump.py \
        tests/programs/frameworks/deepspeed_zero.py --stage 3
"""

import os
import runpy
import sys

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
import torch  # noqa: E402

prog, out = sys.argv[1], os.environ["FR_OUT"]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(prog))
try:
    runpy.run_path(prog, run_name="__main__")
finally:
    with open(os.path.join(out, f"rank_{os.environ['RANK']}"), "wb") as f:
        f.write(torch._C._distributed_c10d._dump_fr_trace(True, True, False))
