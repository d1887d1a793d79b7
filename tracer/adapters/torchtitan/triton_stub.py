"""A stand-in for `triton` while TorchTitan's modules are imported on a machine without it.

TorchTitan 0.3 imports triton at module level in files every model pulls in
(`torchtitan/distributed/minimal_async_ep/kernels.py`, via models/common/moe.py), only to
define `@triton.jit` kernels for GPU paths a CPU dry run never takes. Triton has no wheel for
macOS and weighs ~300 MB on Linux, so the adapter serves these modules' imports with this stub, and only
while their own code runs (`install`): torch itself never sees a fake triton (torch probes for
it with `import triton` and would then try to compile kernels with it). A stub
kernel that is launched anyway raises a one-line RuntimeError naming it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types


class _Any:
    """Whatever `triton.language` expression a kernel's signature evaluates (tl.constexpr,
    tl.pointer_type(tl.int64), ...): callable, indexable, with any attribute."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> _Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Any(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs) -> _Any:
        return _Any(f"{self._name}()")

    def __getitem__(self, key) -> _Any:
        return _Any(f"{self._name}[]")

    def __repr__(self) -> str:
        return f"<triton stub {self._name}>"


class _Kernel:
    """A `@triton.jit` function: kept for its name; launching it (`k[grid](...)`) raises."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __getitem__(self, grid):
        raise RuntimeError(f"triton kernel {self.__name__} needs a GPU and triton; a CPU dry run cannot launch it")

    def __call__(self, *args, **kwargs):
        return self[None]


def _decorator(fn=None, **kwargs):
    """`@triton.jit`, `@triton.jit(...)`, `@triton.autotune(...)`, `@triton.heuristics(...)`."""
    if fn is not None and callable(fn) and not kwargs:
        return fn if isinstance(fn, _Kernel) else _Kernel(fn)
    return lambda f: f if isinstance(f, _Kernel) else _Kernel(f)


def _module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)

    def attribute(
        attr: str,
    ) -> _Any:  # PEP 562 module __getattr__; dunders stay missing
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Any(f"{name}.{attr}")

    mod.__getattr__ = attribute
    return mod


def _make() -> dict[str, types.ModuleType]:
    triton = _module("triton")
    triton.jit = _decorator
    triton.autotune = lambda *a, **k: _decorator
    triton.heuristics = lambda *a, **k: _decorator
    triton.cdiv = lambda a, b: -(-a // b)
    triton.next_power_of_2 = lambda n: 1 << max(0, int(n) - 1).bit_length()
    language = _module("triton.language")
    triton.language = language
    return {"triton": triton, "triton.language": language}


NEEDS_TRITON = (
    "torchtitan.distributed.minimal_async_ep.kernels",
    "torchtitan.overrides.fused_mla",
    "torchtitan.overrides.fused_swiglu",
)
"""TorchTitan 0.3 modules that import triton at module level (kernel definitions only)."""


class _StubbedLoader(importlib.abc.Loader):
    """Runs one module's code with the stub importable, and only while that code runs: the
    stub never stays in sys.modules, so torch's own `import triton` probes still fail."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        stubs = _make()
        saved = {name: sys.modules.get(name) for name in stubs}
        sys.modules.update(stubs)
        try:
            self.loader.exec_module(module)
        finally:
            for name, mod in saved.items():
                if mod is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = mod


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in NEEDS_TRITON:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = _StubbedLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Serve `import triton` with the stub in NEEDS_TRITON when triton is not installed."""
    if importlib.util.find_spec("triton") is not None:
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
