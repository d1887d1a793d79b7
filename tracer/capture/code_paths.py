"""Where code lives, by its file's path: the program's own code (a user frame) against torch, the
packages torch depends on, commtrace itself, the standard library and code torch.compile wrote.
Attribution (capture/attribution.py) names an op's frame by the first user frame."""

from __future__ import annotations

import functools
import os
import re
import sysconfig

import torch

# torch's distribution installs three top-level packages side by side
TORCH_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), name) + os.sep
    for name in ("torch", "functorch", "torchgen")
)
_REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_COMMTRACE_DIRS = tuple(_REPO_DIR + name + os.sep for name in ("tracer", "analyzer", "traceformat"))
_WORKLOADS_DIR = _REPO_DIR + os.path.join("tracer", "workloads") + os.sep
_STDLIB_DIRS = tuple({sysconfig.get_paths()["stdlib"] + os.sep, sysconfig.get_paths()["platstdlib"] + os.sep})
INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def is_user_path(path: str) -> bool:
    """Not torch (nor a package torch depends on: torch calls through typing_extensions' wrappers,
    sympy, fsspec), not commtrace (its built-in workloads excepted: they play the user's program),
    not the standard library (a site-packages folder below the stdlib folder is not stdlib)."""
    if path.startswith(_COMMTRACE_DIRS):
        return path.startswith(_WORKLOADS_DIR)
    if path.startswith(TORCH_DIRS) or _generated_by_inductor(path):
        return False
    cut = max(path.rfind(marker) + len(marker) if marker in path else -1 for marker in INSTALLED)
    if cut >= 0:
        return path[cut:].split(os.sep, 1)[0].removesuffix(".py") not in torch_dependencies()
    for stdlib in _STDLIB_DIRS:
        if path.startswith(stdlib):
            return False
    return True


def _generated_by_inductor(path: str) -> bool:
    """Code torch.compile wrote (inductor's cache: $TORCHINDUCTOR_CACHE_DIR or a torchinductor_USER
    folder): a collective issued there belongs to the frame that called the compiled module."""
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if cache and path.startswith(cache.rstrip(os.sep) + os.sep):
        return True
    return f"{os.sep}torchinductor_" in path


@functools.cache
def torch_dependencies() -> frozenset[str]:
    """Top-level module names of the distributions torch requires, transitively (no extras)."""
    from importlib import metadata

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    seen: set[str] = set()
    todo = ["torch"]
    while todo:
        dist = todo.pop()
        try:
            reqs = metadata.distribution(dist).requires or []
        except metadata.PackageNotFoundError:
            continue
        for req in reqs:
            if "extra ==" in req:
                continue
            name = norm(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0])
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return frozenset(
        top for top, dists in metadata.packages_distributions().items() if any(norm(d) in seen for d in dists)
    )


torch_dependencies()  # computed once where torch is imported (the fork server), not per rank
