"""Local mode's rank reads: the program's own reads answer its rank per simulated rank.

LocalTensorMode runs one Python for every simulated rank. When the program's own code asks
"who am I" (`dist.get_rank()`, `dist.get_rank(group)`, `group.rank()`, `DeviceMesh.get_rank()` /
`get_local_rank()` / `get_coordinate()`, `$RANK` / `$LOCAL_RANK` / `$ROLE_RANK`, and
torch.utils.data's reads: a DistributedSampler picks the program's data) it gets a
`rank_values.RankInt`, one value per simulated rank, and every use of it follows one rule
(local/rank_values.py: carried per rank, a rank-0 observing branch, or a one-line refusal).
torch's own reads (its set-up, DDP, FSDP, DTensor) get rank 0's plain int, as LocalTensor expects.

`int(os.environ["RANK"])`: CPython turns what `str.__int__` returns into a plain int, so the
script runs with commtrace's `int` in its namespace (`ProgramInt`: the builtin for isinstance and
every other argument, a RankInt for a rank's text); another module of the program's own source
gets it at its first rank read, whose `int()` (already looked up) falls back to reading the
source: refused where the name it is assigned to is compared or branched on.
"""

from __future__ import annotations

import ast
import contextlib
import copyreg
import functools
import importlib._bootstrap_external
import operator
import os
import sys
from types import CodeType, FrameType
from typing import Any

import torch.distributed as dist
from torch.distributed._local_tensor import _c10d as local_c10d
from torch.distributed._local_tensor import _LocalDeviceMesh

from tracer.capture.patches import Patcher
from tracer.local import rank_branch, rank_values
from tracer.local.rank_values import RankDependent, RankInt, RankText, refusal

__all__ = ["RankDependent", "framework_code", "framework_reads", "install"]

RANK_ENV = ("RANK", "LOCAL_RANK", "ROLE_RANK")
"""torchrun variables whose value differs per rank."""


def _site(depth: int) -> str:
    f = sys._getframe(depth + 1)
    return f"{rank_values.rel(f.f_code.co_filename)}:{f.f_lineno}"


def plain_int_of_rank_text(text: RankText, f: FrameType) -> int:
    """`int($RANK)` with the builtin int: rank 0's number. Refused where the program's source
    compares or branches on what it is assigned to (the rank cannot be followed from here)."""
    if _compared_alike(text, f):
        return int(str.__str__(text))
    used = branch_on_read(f.f_code.co_filename, f.f_lineno)
    if used is not None:
        raise refusal(text.read, f"compared at {rank_values.rel(f.f_code.co_filename)}:{used}")
    return int(str.__str__(text))


rank_values.HOOKS["plain_int"] = plain_int_of_rank_text


def _compared_alike(text: RankText, f: FrameType) -> bool:
    """Is this `int()` call the operand of a comparison with constants that every rank answers
    alike (`int(os.environ.get("LOCAL_RANK", -1)) != -1`)? Then rank 0's number is what it
    compares, and the comparison is all that sees it."""
    try:
        tree = _TREES.get(f.f_code.co_filename) or _TREES.setdefault(
            f.f_code.co_filename, ast.parse(open(f.f_code.co_filename).read())
        )
        code: Any = f.f_code  # co_positions: Python 3.11
        line, end_line, col, end_col = list(code.co_positions())[f.f_lasti // 2]
    except (OSError, SyntaxError, ValueError, IndexError):
        return False
    for n in ast.walk(tree):
        if not isinstance(n, ast.Compare) or len(n.ops) != 1:
            continue
        left = n.left
        if (left.lineno, left.end_lineno, left.col_offset, left.end_col_offset) != (line, end_line, col, end_col):
            continue
        try:
            other = ast.literal_eval(n.comparators[0])
        except ValueError:
            return False
        op = _COMPARE.get(type(n.ops[0]))
        if op is None or not isinstance(other, (int, float)):
            return False
        return len({op(int(v), other) for v in text.values.values()}) == 1
    return False


_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


class _IntMeta(type):
    # where a module's `int` is ProgramInt, its annotations and type tests name it: it stands
    # for the builtin there too (torch.library's schema inference looks annotations up in a dict
    # keyed by `int`; `type(x) == int`)
    def __instancecheck__(cls, obj):
        return isinstance(obj, int)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, int)

    def __eq__(cls, other):
        return other is int or other is cls

    def __hash__(cls):
        return hash(int)


class ProgramInt(int, metaclass=_IntMeta):
    """The program's `int`: the builtin, except that a rank's text gives a RankInt."""

    def __new__(cls, x=0, *args, **kwargs):
        if isinstance(x, RankText):
            return x.as_int(*args, **kwargs)
        return int(x, *args, **kwargs)


ProgramInt.__name__ = ProgramInt.__qualname__ = "int"


def _as_builtin(cls) -> Any:
    return (type, (0,))  # pickled as the builtin: type(0) is int


copyreg.pickle(_IntMeta, _as_builtin)


def give_int(f: FrameType) -> None:
    """The module whose code read a rank's text gets commtrace's `int` for its later reads
    (unless it defines its own)."""
    g = f.f_globals
    if "int" not in g:
        g["int"] = ProgramInt


def names_rank_env(code: CodeType) -> bool:
    """Does this code (or code nested in it) spell a rank variable's name (`os.environ["RANK"]`,
    `os.environ.get("LOCAL_RANK", -1)`) or read the environment at all (a helper that is handed
    its keys: accelerate's `get_int_from_env(["RANK", ...])`)?"""
    if "environ" in code.co_names or "getenv" in code.co_names:
        return True
    for c in code.co_consts:
        if isinstance(c, str) and c in RANK_ENV:
            return True
        if isinstance(c, CodeType) and names_rank_env(c):
            return True
    return False


def _give_int_at_import(p: Patcher, is_user) -> None:
    """A module of the program's code (its script's package or an installed framework) whose
    source names a rank variable gets commtrace's `int` before its body runs: its first
    `int(os.environ.get("LOCAL_RANK", -1))` (module level, as torchmetrics' `rank_zero_only.rank`)
    already looks `int` up before the read, where `give_int` comes too late."""
    loader = importlib._bootstrap_external._LoaderBasics  # type: ignore[attr-defined]

    def exec_module(self, module):
        code = self.get_code(module.__name__)
        if code is None:
            raise ImportError(f"cannot load module {module.__name__!r} when get_code() returns None")
        if "int" not in module.__dict__ and is_user(code) and names_rank_env(code):
            module.__dict__["int"] = ProgramInt
        exec(code, module.__dict__)

    p.set(loader, "exec_module", exec_module)


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
        if node is scope or not isinstance(node, ast.stmt):
            continue
        if not node.lineno <= line <= (node.end_lineno or node.lineno):
            continue
        body = getattr(node, "body", None)
        if isinstance(node, _BLOCKS) and body and line >= body[0].lineno:
            continue  # the line is in its body: a statement there is the one
        if stmt is None or node.lineno >= stmt.lineno:
            stmt = node
    if stmt is None:
        return None
    if isinstance(stmt, (ast.If, ast.While)):  # the read is in the header: its test branches on it
        return stmt.lineno
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


_DATA = os.path.join("torch", "utils", "data") + os.sep
"""torch.utils.data reads the rank for the program (a DistributedSampler picks each rank's samples):
its reads are the program's."""


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
        known = _USER[f.f_code] = rec.attribution._describe(f.f_code) is not None or _DATA in f.f_code.co_filename
    return up if known else 0


_USER: dict = {}


def _group_ranks(pg, world: int) -> dict[int, int]:
    """Each simulated rank's rank in `pg` (its sibling of rank 0's group; -1 outside all)."""
    out = dict.fromkeys(range(world), -1)
    ranks, offsets, _ = local_c10d._prepare_collective_groups(pg)
    for o in offsets:
        for i, r in enumerate(ranks):
            if o + r in out:
                out[o + r] = i
    return out


def install(p: Patcher, rec) -> None:
    """Local mode: the program's own rank reads answer RankInts (see module docstring)."""
    world = rec.world_size
    assert rank_branch.decide is rank_values.HOOKS["decide"]  # rank-dependent bools are decided there
    rank_values._USER_CODE[0] = lambda code: rec.attribution._describe(code) is not None
    _give_int_at_import(p, rank_values._USER_CODE[0])

    def read_of(label: str, up: int) -> str:
        return f"{label} at {_site(up + 1)}"

    orig_get_rank = dist.get_rank

    @functools.wraps(orig_get_rank)
    def get_rank(group=None):
        out = orig_get_rank(group)
        up = _user_caller(rec, 1)
        if not up or not isinstance(out, int) or out < 0:
            return out
        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        return rank_values.make(_group_ranks(pg, world), read_of("dist.get_rank()", up))

    p.everywhere(orig_get_rank, get_rank)
    p.set(dist.distributed_c10d, "get_rank", get_rank)
    orig_pg_rank = dist.ProcessGroup.rank

    @functools.wraps(orig_pg_rank)
    def pg_rank(self):
        out = orig_pg_rank(self)
        up = _user_caller(rec, 1)
        if not up or not isinstance(out, int) or out < 0:
            return out
        return rank_values.make(_group_ranks(self, world), read_of("group.rank()", up))

    p.set(dist.ProcessGroup, "rank", pg_rank)

    def mesh(name: str):
        orig = getattr(_LocalDeviceMesh, name)

        @functools.wraps(orig)
        def read(self, *args, **kwargs):
            out = orig(self, *args, **kwargs)
            up = _user_caller(rec, 1)
            if not up:
                return out
            label = read_of(f"DeviceMesh.{name}()", up)
            if isinstance(out, list):
                return [_carry(v, label) for v in out]
            return _carry(out, label)

        p.set(_LocalDeviceMesh, name, staticmethod(read))

    for name in ("get_rank", "get_local_rank", "get_coordinate"):
        mesh(name)

    environ = os.environ
    base = type(environ)

    def text(key: str, value: str, up: int):
        give_int(sys._getframe(up))
        return RankText({r: str(r) for r in range(world)}, f"${key} at {_site(up)}")

    class RankEnviron(base):  # type: ignore[valid-type,misc]
        def __getitem__(self, key):
            value = base.__getitem__(self, key)
            up = _user_caller(rec, 1) if key in RANK_ENV else 0
            return text(key, value, up + 1) if up else value

        def get(self, key, default=None):
            if key not in self:
                return default
            value = base.__getitem__(self, key)
            up = _user_caller(rec, 1) if key in RANK_ENV else 0
            return text(key, value, up + 1) if up else value

    p.set(environ, "__class__", RankEnviron)


def _carry(v, label: str):
    """LocalTensor's own per-rank int (a SymInt over a LocalIntNode) as the program's RankInt."""
    from torch.distributed._local_tensor import LocalIntNode

    if isinstance(v, RankInt) or not hasattr(v, "node") or not isinstance(v.node, LocalIntNode):
        return v
    return rank_values.make(dict(v.node._local_ints), label)
