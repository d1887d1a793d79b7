"""A program of its own project (tests/record/test_user_line.py lays it out with a pyproject.toml
beside it) that trains through an installed framework (fakefw, in a site-packages folder) and a
package of its own project installed in editable mode (src/projlib, on sys.path through a .pth
file): `train.py SITE_DIR [all|raise]`. Seeded bug: the metric gather runs on the main process
only (on every rank with `all`); with `raise`, the framework's own check fails on rank 2 after
the loop, with a message of three lines."""
import site
import sys

site.addsitedir(sys.argv[1])

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from fakefw import Accelerator  # noqa: E402
from projlib.metrics import sync_loss  # noqa: E402

acc = Accelerator()
for step in range(2):
    loss = torch.ones(4)
    sync_loss(acc, loss)
    if acc.is_main_process or sys.argv[2:] == ["all"]:
        acc.gather(loss)
if sys.argv[2:] == ["raise"]:  # the framework's own check fails on rank 2, which holds one more
    acc.assert_same_length(list(range(3 + (dist.get_rank() == 2))), 3)
