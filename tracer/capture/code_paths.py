"""Where code lives, by its file's path: code outside torch, the packages torch depends on,
commtrace itself, the standard library and code torch.compile wrote (a user frame: the program,
or a library it calls into); and of those, the program's own code.

The program's own code (`ProgramCode`): the files of the project the program belongs to, not
installed. Its project is the nearest folder, from the script's folder up, that holds a project
marker (pyproject.toml, setup.py, setup.cfg, .git): the repository a user keeps the script in,
so a package of that project installed in editable mode (its files stay in the project) is the
program's too; with no marker above, the script's own folder. A file under an installed-packages
folder (site-packages, dist-packages: a venv inside the project included) is a library's, and so
is a package installed in editable mode from elsewhere (a framework cloned beside the project).
A `pkg.mod:fn` entrypoint's project is found from the module's file the same way (an entrypoint
in an installed package has no code of its own). commtrace's built-in workloads play the user's
program. Attribution (capture/attribution.py) names an op's frames by these."""

from __future__ import annotations

import functools
import importlib.util
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


PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
"""What makes a folder a project's root (see the module docstring)."""


def installed(path: str) -> bool:
    """Under a site-packages / dist-packages folder: an installed package's file."""
    return any(marker in path for marker in INSTALLED)


def project_root(path: str) -> str:
    """The project a file belongs to: the nearest folder from its own up with a PROJECT_MARKERS
    entry, else the file's own folder (an absolute path, no trailing separator)."""
    start = folder = os.path.dirname(os.path.abspath(path))
    while True:
        if any(os.path.exists(os.path.join(folder, m)) for m in PROJECT_MARKERS):
            return folder
        up = os.path.dirname(folder)
        if up == folder:
            return start
        folder = up


class ProgramCode:
    """Which files are the program's own code: under its project's root and not installed (the
    module docstring says why), or commtrace's built-in workloads. `home`: the program's script
    (or its entrypoint module's file); None: only the built-in workloads are the program's."""

    def __init__(self, home: str | None):
        self.root = None
        if home and not installed(os.path.abspath(home)) and not home.startswith(_COMMTRACE_DIRS):
            self.root = project_root(home) + os.sep

    def __contains__(self, path: str) -> bool:
        if path.startswith(_WORKLOADS_DIR):
            return True
        if self.root is None or not path.startswith(self.root) or installed(path[len(self.root) - 1 :]):
            return False
        return not path.startswith(_COMMTRACE_DIRS) and not path.startswith(TORCH_DIRS)


def program_home(script: str | None, entrypoint: str | None) -> str | None:
    """The file a program's project is found from: its script, or its entrypoint module's file
    (found without importing it: None where it cannot be found)."""
    if script:
        return os.path.abspath(script)
    if not entrypoint:
        return None
    top = entrypoint.split(":", 1)[0].split(".", 1)[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin if spec.origin and spec.origin not in ("built-in", "frozen") else None


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
