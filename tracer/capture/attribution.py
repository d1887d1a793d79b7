"""Where an op came from: module FQN, phase (forward/backward/optimizer), step, user frame.

Module tracking reuses torch's own ModTracker (global module hooks plus multi-grad hooks for
backward), so FSDP2's backward collectives are attributed to the module whose gradients they
carry. Steps are counted with the global optimizer step hooks.
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
from types import CodeType

import torch
from torch.distributed._tools.mod_tracker import ModTracker
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_TRACER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_WORKLOADS_DIR = _TRACER_DIR + "workloads" + os.sep
_STDLIB_DIRS = tuple({sysconfig.get_paths()["stdlib"] + os.sep, sysconfig.get_paths()["platstdlib"] + os.sep})


class Attribution:
    """Answers "where are we" for each recorded op. One per recording process."""

    def __init__(self, root: str | None = None):
        self.step = 0
        self.in_optimizer = 0
        self._root = root or os.getcwd()
        self._tracker = ModTracker()
        self._user_code: dict[CodeType, str | None] = {}
        self._handles: list = []
        self.owners: list[str] = []

    def install(self) -> None:
        self._tracker.__enter__()
        self._handles = [register_optimizer_step_pre_hook(self._opt_pre),
                         register_optimizer_step_post_hook(self._opt_post)]

    def uninstall(self) -> None:
        self._tracker.__exit__(None, None, None)
        for h in self._handles:
            h.remove()
        self._handles = []

    def _opt_pre(self, *_):
        self.in_optimizer += 1

    def _opt_post(self, *_):
        self.in_optimizer -= 1
        if self.in_optimizer == 0:
            self.step += 1

    def module(self) -> str:
        """FQN of the innermost active module, relative to its root ("" outside any module).
        An owner set by a hook that knows better (FSDP's param group) wins."""
        if self.owners:
            return self.owners[-1]
        best = ""
        for name in self._tracker.parents:  # ModTracker names are "<RootClass>.<fqn>"
            if name != "Global" and (name.count("."), len(name)) > (best.count("."), len(best)):
                best = name
        return best.split(".", 1)[1] if "." in best else best

    @contextlib.contextmanager
    def owning(self, fqn: str):
        """Ops inside belong to module `fqn` (e.g. the FSDP unit whose parameters they move)."""
        self.owners.append(fqn)
        try:
            yield
        finally:
            self.owners.pop()

    def phase(self) -> str:
        if self.in_optimizer:
            return "optimizer"
        if torch._C._current_graph_task_id() != -1:
            return "backward"
        if len(self._tracker.parents) > 1:
            return "forward"
        return "other"

    def frame(self) -> str:
        """The first frame outside torch, commtrace and the standard library."""
        f = sys._getframe(1)
        while f is not None:
            code = f.f_code
            where = self._user_code.get(code, 0)
            if where == 0:
                where = self._user_code[code] = self._describe(code)
            if where is not None:
                return where.format(f.f_lineno)
            f = f.f_back
        return ""

    def _describe(self, code: CodeType) -> str | None:
        path = code.co_filename
        if path.startswith(_TRACER_DIR) and not path.startswith(_WORKLOADS_DIR):
            return None
        if (path.startswith((_TORCH_DIR,) + _STDLIB_DIRS) or path.startswith("<")
                or f"{os.sep}site-packages{os.sep}" in path):
            return None
        try:
            rel = os.path.relpath(path, self._root)
        except ValueError:
            rel = path
        if rel.startswith(".." + os.sep + ".."):
            rel = path
        return rel.replace("{", "{{").replace("}", "}}") + ":{} in " + code.co_name.replace("{", "{{").replace("}", "}}")
