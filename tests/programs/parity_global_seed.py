"""#31: the global generator after torch.manual_seed (model init, data, dropout), reseeded, and
set back with torch.set_rng_state: every rank draws what its own process would."""
import torch
import torch.distributed as dist

from parity_dump import dump

dist.init_process_group("gloo")
world = dist.get_world_size()
torch.manual_seed(7)
model = torch.nn.Linear(4, 2)
x = torch.randn(8, 4)
dropped = torch.nn.functional.dropout(x, 0.5)
loss = model(dropped).pow(2).mean()
loss.backward()
for p in model.parameters():
    dist.all_reduce(p.grad)
    p.grad /= world
state = torch.get_rng_state()
a = torch.rand(3)
torch.set_rng_state(state)            # a real run draws `a` again
b = torch.rand(3)
torch.manual_seed(7)
y = torch.randn(8, 4)                 # == x
dump("x", x)
dump("dropped", dropped)
dump("loss", loss)
dump("weight_grad", model.weight.grad)
dump("bias_grad", model.bias.grad)
dump("a", a)
dump("b", b)
dump("y", y)
