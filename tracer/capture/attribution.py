"""Where an op came from: module FQN, phase (forward/backward/optimizer), step, user frame.

Forward: global module pre/post hooks keep a stack of root-relative FQNs. A module's own
forward hooks run after the global ones (torch's Module._call_impl), and a TP style's output
all-reduce / reduce-scatter / all-gather runs in one: a module that has forward hooks of its own
gets one more, kept last among them (`_Leave`), which is where it leaves the stack instead, so
what its hooks issue is filed under it (as CommDebugMode files it). Pre-hooks need nothing: the
global pre-hook runs before the module's own. Backward: each module's final output (after its
own hooks) gets a grad_fn prehook that marks the module whose backward autograd just entered.
CommDebugMode learns it from a global full-backward pre-hook, which wraps every module's final
output in a node of its own: modules that return the same tensor (an enclosing module returning
its child's output, a sibling returning its input unchanged: Dropout(p=0), Identity) chain those
nodes in call order, backward runs them in reverse and the last to run, the first module that
returned the tensor, is the module of the backward op that made it. So the first module to
leave with a grad_fn marks it and no later one does (the grad_fn's metadata remembers); the
prehook costs far less than the wrapper nodes or ModTracker's multi-grad hooks did on small
models. FSDP2's param groups name their own unit (see patches._install_fsdp), which beats both.
Steps are counted with the global optimizer hooks.

Modules are known by identity, weakly (_ModuleMap): a program that builds, uses and drops models
gets a dropped module's id back for a new one, which must not inherit its name.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import weakref
from types import CodeType, FrameType
from typing import Any, Generic, TypeVar

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from tracer.capture.code_paths import INSTALLED, TORCH_DIRS, ProgramCode, is_user_path


class Attribution:
    """Answers "where are we" for each recorded op. One per recording process. `program`: which
    files are the program's own code (code_paths.ProgramCode; default: none but the built-in
    workloads)."""

    def __init__(self, root: str | None = None, program: ProgramCode | None = None):
        self.step = 0
        self.in_optimizer = 0
        self._root = root or os.getcwd()
        self._stack: list[str] = []
        self._backward_module = ""
        self._names: _ModuleMap[str] = _ModuleMap()  # module -> its FQN, named when first called
        # module -> its descendants' names below it (module -> name), built when a child is first
        # called inside it, rebuilt when one is not found there (a child swapped in since)
        self._children: _ModuleMap[_ModuleMap[str]] = _ModuleMap()
        # id(code) -> "path:{} in name" template, None for code that is not the user's; keyed by
        # id: hashing a code object hashes its constants on every lookup (a big torch function
        # cost microseconds a frame). The code objects are kept alive so no id is reused.
        self._user_code: dict[int, str | None] = {}
        self._program = program or ProgramCode(None)
        self._own: dict[int, bool] = {}  # id(code) -> the program's own code (kept alive in _codes)
        self._codes: list[CodeType] = []
        self._lines: dict[tuple[int, int], str] = {}  # (id(code), f_lasti) -> "path:line in name"
        self._handles: list = []
        self.owners: list[str] = []
        self._mods: list = []
        self._markers: dict[str, Any] = {}  # FQN -> its backward prehook (one per module, not per call)
        self._by_leave: list[bool] = []  # per stack entry: its module leaves in its own last hook
        self._leave = _Leave(self)
        self._leave_hooks: _ModuleMap[Any] = _ModuleMap()  # module -> the handle of its _Leave hook

    def install(self) -> None:
        self._handles = [
            register_optimizer_step_pre_hook(self._opt_pre),
            register_optimizer_step_post_hook(self._opt_post),
            register_module_forward_pre_hook(self._fw_pre),
            register_module_forward_hook(self._fw_post, always_call=True),
        ]

    def uninstall(self) -> None:
        for h in self._handles:
            h.remove()
        for h in self._leave_hooks.values():
            h.remove()
        self._handles = []
        self._leave_hooks = _ModuleMap()
        self._leave.attribution = None

    def _name(self, mod, top: Any) -> str:
        """`mod`'s FQN; `top`: the module it is called in (None at the root)."""
        name = self._names.get(mod)
        if name is None:
            parent = self._stack[-1] if self._stack else None
            if parent is None:
                name = type(getattr(mod, "_orig_mod", mod) if isinstance(mod, _optimized_module()) else mod).__name__
            else:
                # descendants, not only children: a block in a ModuleDict / ModuleList is
                # called by the model itself, so its container never enters the stack
                below = self._children.get(top)
                child = below.get(mod) if below is not None else None
                if child is None:
                    below = _ModuleMap()
                    for n, m in top.named_modules(remove_duplicate=False):
                        n = _unwrapped(n)
                        if n:  # a module under two names: the last (as before, and as ModTracker)
                            below.set(m, n)
                    self._children.set(top, below)
                    child = below.get(mod)
                base = "" if len(self._stack) == 1 else parent + "."
                name = base + child if child is not None else type(mod).__name__
            self._names.set(mod, name)
        return name

    def _fw_pre(self, mod, args) -> None:
        if torch.compiler.is_compiling():  # traced by dynamo: invisible there (compiled.py enters compiled modules)
            return
        wrapper = _optimized_module()
        if isinstance(mod, (torch.fx.GraphModule, wrapper)) and _called_by_compiler(sys._getframe(1)):
            return  # a compiled graph run by torch.compile's runtime: not one of the program's modules
        if self._mods and isinstance(self._mods[-1], wrapper) and getattr(self._mods[-1], "_orig_mod", None) is mod:
            return  # torch.compile(module)'s wrapper entered already, under the module's own name
        self._stack.append(self._name(mod, self._mods[-1] if self._mods else None))
        self._mods.append(mod)
        self._by_leave.append(self._leave_last(mod))

    def _leave_last(self, mod) -> bool:
        """Put the _Leave hook last among `mod`'s own forward hooks, if it has any; True then.
        Registered here, before the forward: torch snapshots the hooks it runs after it."""
        hooks = mod._forward_hooks
        if not hooks:
            return False
        handle = self._leave_hooks.get(mod)
        if handle is None or handle.id not in hooks:
            handle = mod.register_forward_hook(self._leave, always_call=True)
            self._leave_hooks.set(mod, handle)
        elif next(reversed(hooks)) != handle.id:  # a hook registered since: ours runs after it
            hooks.move_to_end(handle.id)
        return True

    def enter(self, mod) -> None:
        """`mod` starts running outside the global hooks (a compiled module: compiled.py)."""
        self._stack.append(self._name(mod, self._mods[-1] if self._mods else None))
        self._mods.append(mod)
        self._by_leave.append(True)  # it leaves when its caller says so

    def _fw_post(self, mod, args, out) -> None:
        if torch.compiler.is_compiling():
            return
        if self._mods and (self._mods[-1] is not mod or not self._by_leave[-1]):
            self.leave(mod, out)

    def leave(self, mod, out) -> None:
        """`mod`'s forward and all its forward hooks are done: pop it (and whatever did not leave
        above it, e.g. after an exception) and mark its output for backward."""
        if torch.compiler.is_compiling() or not any(m is mod for m in self._mods):
            return
        while True:
            name = self._stack.pop()
            self._by_leave.pop()
            if self._mods.pop() is mod:
                break
        t = (
            out
            if isinstance(out, torch.Tensor)
            else next((x for x in out if isinstance(x, torch.Tensor)), None)
            if isinstance(out, (tuple, list))
            else None
        )
        fn = getattr(t, "grad_fn", None)
        if fn is not None:
            # the first module to return this grad_fn's tensor keeps it: the inner one when an
            # enclosing module returns it too, the earlier one when a sibling passes it through
            meta = fn.metadata
            if _MARKED not in meta:
                meta[_MARKED] = name
                marker = self._markers.get(name)
                if marker is None:
                    marker = self._markers[name] = functools.partial(self._entered_backward, name)
                fn.register_prehook(marker)

    def _entered_backward(self, name: str, grads=None) -> None:
        self._backward_module = name

    def _opt_pre(self, *_):
        self.in_optimizer += 1

    def _opt_post(self, *_):
        self.in_optimizer -= 1
        if self.in_optimizer == 0:
            self.step += 1

    def where(self) -> tuple[str, str, int, str, str]:
        """(module, phase, step, frame, user frame) with one look at autograd (frames: frames()). module: the FQN of the
        innermost active module, relative to its root ("" outside any module); an owner set by a
        hook that knows better (FSDP's param group) wins, and in backward it is the module whose
        backward autograd entered last. phase: optimizer, backward, forward or other."""
        backward = torch._C._current_graph_task_id() != -1
        if self.owners:
            module = self.owners[-1]
        elif self._stack:
            module = self._stack[-1]
        else:
            module = self._backward_module if backward else ""
        phase = "optimizer" if self.in_optimizer else "backward" if backward else "forward" if self._stack else "other"
        return module, phase, self.step, *self.frames()

    @contextlib.contextmanager
    def owning(self, fqn: str):
        """Ops inside belong to module `fqn` (e.g. the FSDP unit whose parameters they move)."""
        self.owners.append(fqn)
        try:
            yield
        finally:
            self.owners.pop()

    def frame(self) -> str:
        """The innermost frame outside torch, commtrace and the standard library (frames()[0])."""
        return self.frames(sys._getframe(1))[0]

    def frames(self, f: FrameType | None = None) -> tuple[str, str]:
        """(frame, user frame): the innermost frame outside torch, commtrace and the standard
        library, wherever it lives (the program, or a library it calls into: the line that issued
        the op), and the innermost frame of the program's own code (code_paths.ProgramCode: the
        user's line that led there; the same where the program issued the op itself, "" where
        no frame of the program is on the stack)."""
        if f is None:
            f = sys._getframe(1)
        known, own = self._user_code, self._own
        first = ""
        while f is not None:
            code = f.f_code
            where = known.get(id(code), 0)
            if where == 0:
                where = known[id(code)] = self._describe(code)
                own[id(code)] = where is not None and code.co_filename in self._program
                self._codes.append(code)
            if isinstance(where, str) and (not first or own[id(code)]):  # a line to name: the first, the user's
                # f_lineno decodes the line table; the bytecode offset names the same line
                key = (id(code), f.f_lasti)
                line = self._lines.get(key)
                if line is None:
                    line = self._lines[key] = where.format(f.f_lineno)
                if own[id(code)]:
                    return (first or line), line
                first = line
            f = f.f_back
        return first, ""

    def is_program(self, path: str) -> bool:
        """Whether a file is the program's own code (code_paths.ProgramCode)."""
        return path in self._program

    def _describe(self, code: CodeType) -> str | None:
        """'path:{} in name' for user code (path relative to the root, or to its site-packages
        folder when installed), None for code that is not the user's."""
        path = code.co_filename
        if path.startswith("<") or not is_user_path(path):
            return None
        cut = max(path.rfind(marker) + len(marker) if marker in path else -1 for marker in INSTALLED)
        if cut >= 0:  # an installed package: shown as it is imported, the same on every machine
            rel = path[cut:]
        else:
            try:
                rel = os.path.relpath(path, self._root)
            except ValueError:
                rel = path
            if rel.startswith(".." + os.sep):  # outside the root: where it is, wherever the root sits
                rel = path
        return (
            rel.replace("{", "{{").replace("}", "}}") + ":{} in " + code.co_name.replace("{", "{{").replace("}", "}}")
        )


# torch.compile's runtime calls the graphs it compiled as modules: aot_eager's forward and
# backward fx.GraphModule (the backward wrapped in torch._dynamo.disable, an OptimizedModule), at run
# time, where the global hooks see them. They are not the program's modules (inductor's compiled
# code is no module at all): skipped, the compiled module (compiled.py) or the program's own
# OptimizedModule keeps the ops they issue, in forward and in backward (its output's marker).
# torch._dynamo is not imported here: importing it registers ops (`_dtensor::...`) and costs seconds
_WRAPPER: list[type] = []  # torch._dynamo's OptimizedModule, once a program has imported it


class _NotImported:
    """Stands for OptimizedModule before torch._dynamo is imported: no module is one."""


def _optimized_module() -> type:
    if not _WRAPPER:
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        if eval_frame is None:
            return _NotImported
        _WRAPPER.append(eval_frame.OptimizedModule)
    return _WRAPPER[0]


_COMPILER_DIRS = tuple(TORCH_DIRS[0] + name + os.sep for name in ("_dynamo", "_functorch", "_inductor"))
_CALL_DIRS = tuple(TORCH_DIRS[0] + name + os.sep for name in (os.path.join("nn", "modules"), "fx"))


def _called_by_compiler(f: FrameType | None) -> bool:
    """The first frame below the module call machinery (nn.Module, fx.GraphModule) is torch.compile's."""
    wrapper_call = _optimized_module().__call__.__code__ if _WRAPPER else None
    while f is not None and (f.f_code.co_filename.startswith(_CALL_DIRS) or f.f_code is wrapper_call):
        f = f.f_back
    return f is not None and f.f_code.co_filename.startswith(_COMPILER_DIRS)


def _unwrapped(name: str) -> str:
    """A descendant's name without torch.compile(module)'s `_orig_mod` hops (the wrapper has the name)."""
    return name if "_orig_mod" not in name else ".".join(p for p in name.split(".") if p != "_orig_mod")


_MARKED = "commtrace.module"  # key in a grad_fn's metadata: the module whose backward it starts

_V = TypeVar("_V")


class _ModuleMap(Generic[_V]):
    """module -> value by identity, not keeping the module alive: an entry goes when its module
    does, and a module born at a dead one's address (same id) finds nothing. Modules are never
    hashed (one with __eq__ but no __hash__ is unhashable; WeakKeyDictionary would need it). An
    object that takes no weak reference is held strongly instead, so its id is never reused
    while its entry lives."""

    __slots__ = ("_by_id", "__weakref__")

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, _V]] = {}  # id -> (weakref or the object itself, value)

    def get(self, obj: object) -> _V | None:
        entry = self._by_id.get(id(obj))
        if entry is None:
            return None
        ref, value = entry
        held = ref() if isinstance(ref, weakref.ref) else ref
        return value if held is obj else None

    def set(self, obj: object, value: _V) -> None:
        key = id(obj)
        try:
            this = weakref.ref(self)

            def drop(ref: weakref.ref, key: int = key) -> None:
                owner = this()
                if owner is not None and owner._by_id.get(key, (None,))[0] is ref:
                    del owner._by_id[key]

            ref: Any = weakref.ref(obj, drop)
        except TypeError:  # no weak references to it: hold it
            ref = obj
        self._by_id[key] = (ref, value)

    def values(self) -> list[_V]:
        return [value for _, value in self._by_id.values()]

    def __len__(self) -> int:
        return len(self._by_id)


class _Leave:
    """A module's last forward hook: the module leaves the attribution stack after its own hooks
    ran. Copies of the module (deepcopy) share it; a pickled one loads as a no-op."""

    __slots__ = ("attribution",)

    def __init__(self, attribution: Attribution | None):
        self.attribution = attribution

    def __call__(self, mod, args, out) -> None:
        if self.attribution is not None:
            self.attribution.leave(mod, out)

    def __deepcopy__(self, memo) -> _Leave:
        return self

    def __reduce__(self):
        return (_Leave, (None,))
