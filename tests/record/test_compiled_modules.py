"""A module compiled with `module.compile(fullgraph=True)` (TorchTitan's --compile.enable) runs under
commtrace's attribution: the hooks stay out of dynamo's graph, and the compiled module is entered
around its compiled call, so what it issues (forward and backward) is filed under it. Before
#28 item 1 dynamo raised `Unsupported: Tensor with grad_fn()` on the first forward."""

from __future__ import annotations

import os

import torch

from tracer.capture import compiled
from tracer.capture.attribution import Attribution, is_user_path
from tracer.capture.patches import Patcher


def test_a_compiled_block_is_entered_and_its_backward_is_its_own():
    torch.manual_seed(0)
    att, p = Attribution(), Patcher()
    att.install()
    compiled.install(p, att)
    try:
        block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        model = torch.nn.Sequential(block, torch.nn.Linear(4, 2))
        block.compile(backend="eager", fullgraph=True)
        seen = []
        block[0].weight.register_hook(lambda g: seen.append(att.where()[:2]))
        for _ in range(2):  # the first call compiles, the second runs the compiled code
            model(torch.randn(3, 4)).sum().backward()
        assert seen == [("0", "backward"), ("0", "backward")]
        assert att._stack == []  # every module left
    finally:
        p.undo()
        att.uninstall()


def test_inductor_generated_code_is_not_the_users_frame():
    assert not is_user_path(os.path.join(os.sep, "tmp", "torchinductor_root", "cg", "cgwrmvz.py"))
    assert is_user_path(os.path.join(os.sep, "home", "me", "train.py"))
