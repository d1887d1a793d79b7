"""Honest local mode: a program that uses its rank is refused where it uses it.

LocalTensorMode runs one Python for every simulated rank, with rank 0's answers to "who am I"
(`dist.get_rank()`, `group.rank()`, `$RANK` / `$LOCAL_RANK`). A branch on that answer (`if rank == 0:` an extra
collective) would silently be recorded as rank 0's path on every rank. So when the program's
own code asks, it gets a `RankValue`: rank 0's number, which prints and does arithmetic like
one, but raises `RankDependent` when the program compares, branches, hashes or indexes with
it, naming where the rank was read and where it was used, and pointing at `--mode fake`
(a process per rank: real per-rank control flow). Torch's own calls get plain ints.

`DeviceMesh.get_rank()` / `get_local_rank()` / `get_coordinate()` are LocalTensor's own
per-rank integers (a value per simulated rank): tensor math on them is per rank, as it should.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import sys
from types import FrameType

import torch.distributed as dist

from tracer.capture.patches import Patcher
from tracer.capture.recorder import RecordError

RANK_ENV = ("RANK", "LOCAL_RANK", "ROLE_RANK")
"""torchrun variables whose value differs per rank."""


class RankDependent(RecordError):
    """The program used its rank in local mode (one-line message)."""


def _site(depth: int) -> str:
    f = sys._getframe(depth + 1)
    path = f.f_code.co_filename
    rel = os.path.relpath(path)
    return f"{path if rel.startswith('..' + os.sep + '..') else rel}:{f.f_lineno}"


def _int_method(name: str):
    """RankValue's int method `name`: an int result keeps the read it came from."""
    op = getattr(int, name)

    def method(self, *args):
        out = op(self, *args)
        return RankValue(out, self.read) if isinstance(out, int) and out is not NotImplemented else out

    return method


class RankValue(int):
    """Rank 0's rank, remembering where it was read (see module docstring)."""

    read: str

    def __new__(cls, value: int, read: str):
        self = super().__new__(cls, value)
        self.read = read
        return self

    def _refuse(self, *args, **kwargs):
        raise RankDependent(
            f"the program's behaviour depends on its rank ({self.read}, used at {_site(1)}): local mode runs "
            f"every rank through rank 0's Python and would record rank 0's path for all; "
            f"record it with --mode fake"
        )

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __hash__ = __index__ = _refuse
    __float__ = __complex__ = __round__ = _refuse

    for _n in (
        "__add__",
        "__radd__",
        "__sub__",
        "__rsub__",
        "__mul__",
        "__rmul__",
        "__floordiv__",
        "__rfloordiv__",
        "__mod__",
        "__rmod__",
        "__neg__",
        "__pos__",
        "__abs__",
        "__xor__",
        "__rxor__",
        "__and__",
        "__rand__",
        "__or__",
        "__ror__",
        "__lshift__",
        "__rshift__",
    ):
        locals()[_n] = _int_method(_n)
    del _n

    def __int__(self):
        return self

    def __reduce__(self):  # pickled (an object collective): the read travels with it
        return (RankValue, (int(super().__int__()), self.read))

    def __repr__(self):
        return int.__repr__(self)

    __str__ = __repr__

    def __format__(self, spec):
        return int.__format__(int.__int__(self), spec)


class RankText(str):
    """`$RANK` as read by the program. CPython turns whatever `int()` of it returns into a plain
    int, so its uses cannot be followed at run time (dist.get_rank()'s can). Instead `int()`
    reads the program's source: if the name it is assigned to (or the expression it is in) is
    compared or branched on in the enclosing function, it is refused there; a rank that only
    seeds or labels per-rank data (`torch.manual_seed(rank)`, a log line) is let through."""

    read: str

    def __new__(cls, value: str, read: str):
        self = super().__new__(cls, value)
        self.read = read
        return self

    def __int__(self):
        f = sys._getframe(1)
        used = branch_on_read(f.f_code.co_filename, f.f_lineno)
        if used is not None:
            raise RankDependent(
                f"the program's behaviour depends on its rank ({self.read}, compared at "
                f"{_rel(f.f_code.co_filename)}:{used}): local mode runs every rank through rank 0's "
                f"Python and would record rank 0's path for all; record it with --mode fake"
            )
        return int(str.__str__(self))


def _rel(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith(".." + os.sep + "..") else rel


_BRANCHES = (ast.Compare, ast.If, ast.IfExp, ast.While, ast.BoolOp, ast.Assert, ast.Match)


def branch_on_read(path: str, line: int) -> int | None:
    """Line of the first compare / branch in `path` on what the statement at `line` assigns
    (within its function, else the module), or on that statement's own expression."""
    try:
        tree = _TREES.get(path) or _TREES.setdefault(path, ast.parse(open(path).read(), path))
    except (OSError, SyntaxError, ValueError):
        return None
    scope, stmt = tree, None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (
            node.end_lineno or node.lineno
        ):
            if scope is tree or node.lineno >= scope.lineno:
                scope = node
    for node in ast.walk(scope):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if stmt is None or node.lineno >= stmt.lineno and not isinstance(node, _BLOCKS):
                stmt = node
    if stmt is None:
        return None
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        own = [n for n in ast.walk(stmt) if isinstance(n, _BRANCHES)] or (
            [stmt] if isinstance(stmt, (ast.If, ast.While, ast.Assert)) else []
        )
        return stmt.lineno if own else None
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    lines = [
        n.lineno
        for n in ast.walk(scope)
        if isinstance(n, (*_BRANCHES, ast.Subscript))
        and any(isinstance(m, ast.Name) and m.id in names for m in ast.walk(n.test if hasattr(n, "test") else n))
        and not (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in names)
    ]
    return min(lines) if lines else None


_BLOCKS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.While, ast.If, ast.With, ast.Try)
_TREES: dict = {}


_OS_FILE = os.__file__


_TRUSTED = [0]
"""Depth of `framework_reads()` blocks being run."""


@contextlib.contextmanager
def framework_reads():
    """Rank reads inside are a framework's own set-up, answered plainly like torch's: an adapter
    wraps a framework function it knows uses the rank only in ways that hold for every rank
    (TorchTitan's init_distributed checks $RANK against the world size and hands it to
    init_process_group), so the program's later branches on its rank are still refused."""
    _TRUSTED[0] += 1
    try:
        yield
    finally:
        _TRUSTED[0] -= 1


_FRAMEWORK_CODE: set = set()
"""Code objects whose own rank reads are a framework's (see `framework_code`)."""


def framework_code(*functions) -> None:
    """Rank reads made directly in these functions' bodies answer plainly, like torch's: an
    adapter names framework functions whose rank branches only observe (a log line or a sleep on
    rank 0 after training); reads in what they call are still the program's."""
    _FRAMEWORK_CODE.update(getattr(fn, "__code__", fn) for fn in functions)


def _user_caller(rec, depth: int) -> int:
    """How many frames up the program's own code asked (skipping os.getenv); 0: torch asked."""
    if _TRUSTED[0]:
        return 0
    f: FrameType | None = sys._getframe(depth + 1)
    up = depth
    while f is not None and f.f_code.co_filename == _OS_FILE:
        f, up = f.f_back, up + 1
    if f is None or f.f_code in _FRAMEWORK_CODE:
        return 0
    known = _USER.get(f.f_code)
    if known is None:
        known = _USER[f.f_code] = rec.attribution._describe(f.f_code) is not None
    return up if known else 0


_USER: dict = {}


def install(p: Patcher, rec) -> None:
    """Local mode: the program's own rank reads answer RankValues."""

    def wrap(owner, name: str, label: str):
        orig = getattr(owner, name)

        @functools.wraps(orig)
        def read(*args, **kwargs):
            out = orig(*args, **kwargs)
            up = _user_caller(rec, 1)
            if up and isinstance(out, int) and not isinstance(out, RankValue):
                return RankValue(out, f"{label} at {_site(up)}")
            return out

        p.set(owner, name, read)
        return read

    orig = dist.get_rank
    p.everywhere(orig, wrap(dist.distributed_c10d, "get_rank", "dist.get_rank()"))
    wrap(dist.ProcessGroup, "rank", "group.rank()")

    environ = os.environ
    base = type(environ)

    class RankEnviron(base):  # type: ignore[valid-type,misc]
        def __getitem__(self, key):
            value = base.__getitem__(self, key)
            up = _user_caller(rec, 1) if key in RANK_ENV else 0
            return RankText(value, f"${key} at {_site(up)}") if up else value

        def get(self, key, default=None):
            if key not in self:
                return default
            value = base.__getitem__(self, key)
            up = _user_caller(rec, 1) if key in RANK_ENV else 0
            return RankText(value, f"${key} at {_site(up)}") if up else value

    p.set(environ, "__class__", RankEnviron)
