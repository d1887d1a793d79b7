"""A module compiled with `module.compile(fullgraph=True)` (TorchTitan's --compile.enable) runs under
commtrace's attribution: the hooks stay out of dynamo's graph, and the compiled module is entered
around its compiled call, so what it issues (forward and backward) is filed under it. Before
#28 item 1 dynamo raised `Unsupported: Tensor with grad_fn()` on the first forward."""

from __future__ import annotations

import os

import pytest
import torch

from tracer.capture import compiled
from tracer.capture.attribution import Attribution
from tracer.capture.code_paths import is_user_path
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


_SEEN: list = []
_ATT: list = []


@torch.library.custom_op("commtrace_test::probe", mutates_args=())
def _probe(x: torch.Tensor) -> torch.Tensor:
    """An opaque op in the compiled graph, as a collective is: notes where attribution says it runs."""
    _SEEN.append(_ATT[0].where()[:2])
    return x.clone()


@_probe.register_fake
def _(x):
    return torch.empty_like(x)


_probe.register_autograd(lambda ctx, g: _probe(g))


class _Probe(torch.nn.Module):
    def forward(self, x):
        return _probe(x)


@pytest.mark.filterwarnings(r"ignore:Using `torch.compile\(module\)`")
def test_aot_eager_graphs_are_not_modules_of_the_program():
    """aot_eager runs its forward and backward graphs as fx.GraphModules (the backward wrapped in an
    OptimizedModule by torch._dynamo.disable), where the global hooks see them: their ops were filed
    under `GraphModule` / `_orig_mod`, and a compiled loss function's under phase forward. The
    compiled block keeps its ops (as inductor's compiled code gives); a loss outside modules is other."""
    torch.manual_seed(0)
    att, p = Attribution(), Patcher()
    att.install()
    compiled.install(p, att)
    _ATT[:] = [att]
    try:
        block = torch.nn.Sequential(torch.nn.Linear(4, 4), _Probe())
        model = torch.nn.Sequential(block, torch.nn.Linear(4, 2))
        block.compile(backend="aot_eager", fullgraph=True)
        loss = torch.compile(lambda y: _probe(y).sum(), backend="aot_eager")
        wrapped = torch.compile(torch.nn.Sequential(torch.nn.Linear(2, 2), _Probe()), backend="aot_eager")
        for _ in range(2):  # the first call compiles, the second runs the compiled code
            _SEEN.clear()
            out = model(torch.randn(3, 4))
            assert _SEEN == [("0", "forward")]
            loss(out)
            assert _SEEN[1:] == [("", "other")]
            _SEEN.clear()
            wrapped(out).sum().backward()  # torch.compile(module): known by its module's name
            assert _SEEN == [("Sequential", "forward"), ("Sequential", "backward"), ("0", "backward")]
        assert att._stack == []
    finally:
        p.undo()
        att.uninstall()
