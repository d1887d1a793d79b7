"""Recording a program that compiles its modules (`module.compile()`, TorchTitan's
`--compile.enable`): commtrace's module hooks stay out of dynamo's traced region.

The attribution hooks (attribution.py) are global module hooks; a compiled module's hooks and
those of everything it calls are traced by dynamo (`Module.compile` compiles `_call_impl`,
hooks included, with `fullgraph=True` in TorchTitan), where they would be graph breaks or
`Unsupported` errors (a grad_fn read). So they do nothing while dynamo traces, and the compiled
module enters and leaves the attribution stack around its compiled call instead, at run time:
the collectives inside the compiled graph (issued by the compiled code into the recording
process group) are filed under that module (a TransformerBlock: `layers.0`), in forward and
in backward (its compiled backward is marked like any module's), with the frame that called it.
Submodules inside the graph are not entered: a compiled graph has no module boundaries left.
"""

from __future__ import annotations

import functools

import torch


def install(p, attribution) -> None:
    """Wrap what `Module.compile` installs with the module's entry and exit (patched on `p`)."""
    orig = torch.nn.Module.compile

    @functools.wraps(orig)
    def compile(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        compiled = self._compiled_call_impl
        if compiled is None or getattr(compiled, "__commtrace_entered__", False):
            return
        self._compiled_call_impl = _entered(self, compiled, attribution)

    p.set(torch.nn.Module, "compile", compile)


def _entered(mod, compiled, attribution):
    def call(*args, **kwargs):
        attribution.enter(mod)
        out = None
        try:
            out = compiled(*args, **kwargs)
            return out
        finally:
            attribution.leave(mod, out)

    call.__commtrace_entered__ = True  # type: ignore[attr-defined]
    return call
