"""DDP over every rank with a BatchNorm1d after a Linear that has a bias, the global batch of 16
samples split evenly over the ranks (world 1: all 16).

buggy: plain nn.BatchNorm1d under DDP: every rank normalises with its own 16/W samples' mean and
variance, not the batch's. healthy: a hand-written SyncBatchNorm (torch's refuses CPU): the
ranks' sum, sum of squares and count all-reduced (differentiably) before normalising, the
running statistics from the global ones.

fc1's bias feeds the norm directly: the norm subtracts the batch mean, so the loss does not
depend on that bias and its gradient is zero up to rounding (~1e-9) on every side: a value whose
relative error against the reference is meaningless (the tolerance trap of issue 37).

Real gloo (`NUMERICS_PRINT=1 torchrun --nproc-per-node N ddp_batchnorm.py VARIANT`, CPU, torch 2.13, float32;
bench/numerics_twins.py combines the ranks' digest lines into global values):
  world 1 (both variants alike): loss 1.56406188, 1.16518712, 0.977318645 at steps 0-2; after
  step 2 fc1.weight -2.31220676, bn.weight 15.901998, bn.bias -0.116285135, fc2.weight 0.625564449.
  healthy, world 4: the ranks' losses at step 0 1.77719259, 2.2120285, 0.824530363, 1.44249618
  (mean 1.56406191); after step 2 fc1.weight -2.31220682, bn.bias -0.116285133, fc2.weight
  0.625564499. Every value within 6e-8 of world 1 (relative to its scale) but fc1.bias's
  gradient: sum -1.8e-8 against -2.5e-8 at step 0 (both zero up to rounding; norm off by 0.61).
  buggy, world 4: off world 1 from step 0's forward: bn's output has the same sum (0) and sum of
  squares (numel) on every side - a normalised output always does - but other values (its max);
  fc2's output sum -11.6064024 against -10.4559837; the ranks' losses 1.6422224, 1.95202613,
  0.827013135, 1.42852259 (mean 1.46244606 against 1.56406188); after step 2 fc1.weight
  -2.62965101, bn.bias -0.0295973127, fc2.weight 0.772265.
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnn
import torch.nn as nn
import torch.nn.functional as F
from common import TWIN_STEPS, digest, digest_outputs, dtype, outputs, variant
from torch.nn.parallel import DistributedDataParallel as DDP

GLOBAL_BATCH = 16
LR = 0.2


class SyncBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose batch statistics are the whole data-parallel batch's."""

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        local = torch.cat([x.sum(0), x.pow(2).sum(0), x.new_full((1,), x.shape[0])])
        total = dnn.all_reduce(local)  # its backward all-reduces the statistics' gradients
        c = x.shape[1]
        n = total[-1]
        mean = total[:c] / n
        var = total[c : 2 * c] / n - mean.pow(2)
        with torch.no_grad():
            m = self.momentum
            self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
            self.running_var.mul_(1 - m).add_(var.detach() * n / (n - 1), alpha=m)
            self.num_batches_tracked += 1
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class Net(nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)  # its bias: zero gradient up to rounding (the norm removes it)
        self.bn = norm(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.bn(self.fc1(x))))


buggy = variant() == "buggy"
dt = dtype()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
net = Net(nn.BatchNorm1d if buggy else SyncBatchNorm1d).to(dt)
model = DDP(net)
torch.manual_seed(1)
x_all = torch.randn(GLOBAL_BATCH, 8, dtype=dt)
y_all = torch.randn(GLOBAL_BATCH, 4, dtype=dt)
per = GLOBAL_BATCH // world
x, y = x_all[rank * per : (rank + 1) * per], y_all[rank * per : (rank + 1) * per]

seen = outputs(net)
opt = torch.optim.SGD(model.parameters(), lr=LR)
for step in range(TWIN_STEPS):
    opt.zero_grad()
    out = model(x)
    loss = F.mse_loss(out, y)  # each rank's mean over its equal share: DDP's average is the batch's
    loss.backward()
    digest(step, "loss", loss, "mean")
    digest_outputs(step, seen)
    for name, p in net.named_parameters():
        digest(step, f"grad {name}", p.grad)
    opt.step()
    for name, p in net.named_parameters():
        digest(step, f"param {name}", p)
    digest(step, "buffer bn.running_var", net.bn.running_var)
