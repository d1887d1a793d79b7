"""#31: an explicit torch.Generator seeded the same on every rank gives every rank the same
draws (data, an init, a second draw), under local mode as on a real run."""
import torch
import torch.distributed as dist

from parity_dump import dump

dist.init_process_group("gloo")
world = dist.get_world_size()
g = torch.Generator().manual_seed(1)
x = torch.randn(8, 4, generator=g)
w = torch.empty(4, 1)
torch.nn.init.normal_(w, generator=g)
w.requires_grad_()
noise = torch.rand(8, 4, generator=g)
g.manual_seed(1)                      # reseeded: the first draw again
again = torch.randn(8, 4, generator=g)
loss = ((x + noise) @ w).pow(2).mean()
loss.backward()
dist.all_reduce(w.grad)
w.grad /= world
dump("x", x)
dump("noise", noise)
dump("again", again)
dump("loss", loss)
dump("grad", w.grad)
