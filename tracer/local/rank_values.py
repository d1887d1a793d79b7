"""The program's rank, per simulated rank: what every rank read answers in local mode.

LocalTensorMode runs one Python for all simulated ranks. A rank read by the program
(`dist.get_rank()`, `group.rank()`, `DeviceMesh.get_rank()` / `get_local_rank()`,
`int(os.environ["RANK"])`, ...) answers a `RankInt`: a `torch.SymInt` over LocalTensor's
`LocalIntNode`, one value per simulated rank. One rule decides every use of it:

- carried per rank where torch carries a per-rank int: tensor math (`x * rank`), a fill value
  (`torch.full(s, rank)`), a shape (`torch.randn(rank + 1, 4)`), a slice (`x[rank * n:]`), a seed
  (`torch.manual_seed(seed + rank)`: LocalTensorMode seeds each rank with its own); arithmetic with
  Python ints stays per rank and keeps where the rank was read;
- a comparison is computed per rank: where every rank agrees it is a plain bool (`rank < world`),
  otherwise a `RankBool`, whose only accepted use is the test of an `if` that rank 0 takes and
  that only observes (local/rank_branch.py: a rank-0 print, log or save);
- every other use that needs one Python value while the ranks' values differ (an `int()`, an
  index into a Python list, a dict key, `torch.tensor([rank])`, a float, an object sent to a
  collective) is refused in one line naming the read and the use.

Printing a rank prints rank 0's (the one Python is rank 0's, as its own log line would be).
"""

from __future__ import annotations

import dis
import operator
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from torch.distributed._local_tensor import ConstantIntNode, LocalIntNode

from tracer.capture.recorder import RecordError
from tracer.modes import OTHER_MODES


class RankDependent(RecordError):
    """The program used its rank in a way local mode cannot carry (one-line message)."""


def refusal(read: str, use: str, detail: str = "") -> RankDependent:
    """THE one-line refusal of a rank use: '... depends on its rank (READ, USE[; DETAIL]) ...'."""
    what = f"{read}, {use}" + (f"; {detail}" if detail else "")
    return RankDependent(
        f"the program's behaviour depends on its rank ({what}): local mode runs every rank through rank 0's "
        f"Python and would record rank 0's path for all; record it with {OTHER_MODES}"
    )


def rel(path: str) -> str:
    r = os.path.relpath(path)
    return path if r.startswith(".." + os.sep + "..") else r


HOOKS: dict[str, Callable[..., Any]] = {}
"""Set by the modules that use this one (no import back): "decide" (rank_branch.decide: bool() of
a RankBool), "plain_int" (rank_reads: the builtin int() of a rank's text) and "same_item"
(rank_uses.same_item: a sequence indexed by the rank)."""

_USER_CODE: list = [None]
"""Callable(code) -> bool: is this the program's own code (set by rank_reads.install)."""


def user_site(depth: int = 1) -> str:
    """'path:line' of the innermost frame of the program's own code above the caller."""
    f: FrameType | None = sys._getframe(depth + 1)
    first = sys._getframe(depth + 1)
    is_user = _USER_CODE[0]
    while f is not None:
        if is_user is not None and is_user(f.f_code):
            return f"{rel(f.f_code.co_filename)}:{f.f_lineno}"
        f = f.f_back
    return f"{rel(first.f_code.co_filename)}:{first.f_lineno}"


def per_rank(x, r: int):
    """x's value on simulated rank r (a RankInt, a SymInt over a LocalIntNode, or a plain value)."""
    if isinstance(x, torch.SymInt):
        node = x.node
        if isinstance(node, LocalIntNode):
            return node._local_ints[r]
        if isinstance(node, ConstantIntNode):
            return node.val
    if isinstance(x, (RankBool, RankText)):
        return x.values[r]
    return x


class RankNode(LocalIntNode):
    """LocalIntNode that knows where the rank was read: torch asking for one int (`guard_int`,
    e.g. `torch.tensor([rank])`) is refused naming it, instead of an AttributeError."""

    read: str

    def __new__(cls, local_ints: dict[int, int], read: str):
        return super().__new__(cls, local_ints)

    def __init__(self, local_ints: dict[int, int], read: str):
        super().__init__(local_ints)
        self.read = read

    def _one(self, *args, **kwargs):
        raise refusal(self.read, f"used as one Python number at {user_site(1)}")

    guard_int = guard_bool = guard_float = expect_true = expect_size = _one
    guard_size_oblivious = statically_known_true = require_int = _one


LAST_READ: list[str | None] = [None]
"""The read of the RankInt made last: named when torch's C++ rejects a RankInt (it takes only a
plain int there, e.g. `torch.Generator().manual_seed(seed + rank)`) and says only its type."""


def make(values: dict[int, int], read: str):
    """A RankInt over `values`, or the plain int where every rank has the same."""
    if len(set(values.values())) == 1:
        return next(iter(values.values()))
    LAST_READ[0] = read
    f: FrameType | None = sys._getframe(1)
    made: list[tuple] = []
    while f is not None and len(made) < 12:
        made.append((id(f), f.f_code, f.f_lineno))
        f = f.f_back
    LAST_MADE[:] = made
    return RankInt(RankNode(values, read), read)


LAST_MADE: list[tuple] = []
"""(id(frame), code, line) of each frame (innermost first) that was running when the last RankInt
was made: a C++ binding that fails on the line that made it (`op.initialize(world, get_rank())`)
was handed that RankInt (rank_uses.refusal_of_binding)."""


def _arith(name: str):
    def method(self, *args):
        other = args[0] if args else None
        if isinstance(other, (float, torch.SymFloat, complex)):
            raise refusal(self.read, f"used in float arithmetic at {user_site(1)}")
        if other is not None and not isinstance(other, (int, torch.SymInt)):
            return NotImplemented
        op = _OPS[name]
        ranks = self.node._local_ints
        if other is None:
            return make({r: op(v) for r, v in ranks.items()}, self.read)
        out = {r: op(v, per_rank(other, r)) if name[2] != "r" else op(per_rank(other, r), v) for r, v in ranks.items()}
        return make(out, self.read)

    return method


_OPS: dict[str, Callable[..., Any]] = {
    "__add__": operator.add,
    "__radd__": operator.add,
    "__sub__": operator.sub,
    "__rsub__": operator.sub,
    "__mul__": operator.mul,
    "__rmul__": operator.mul,
    "__floordiv__": operator.floordiv,
    "__rfloordiv__": operator.floordiv,
    "__mod__": operator.mod,
    "__rmod__": operator.mod,
    "__neg__": operator.neg,
    "__pos__": operator.pos,
    "__abs__": operator.abs,
    "__and__": operator.and_,
    "__rand__": operator.and_,
    "__or__": operator.or_,
    "__ror__": operator.or_,
    "__xor__": operator.xor,
    "__rxor__": operator.xor,
    "__lshift__": operator.lshift,
    "__rshift__": operator.rshift,
    "__pow__": operator.pow,
}


def _compare(name: str):
    op = getattr(operator, name.strip("_"))

    def method(self, other):
        if not isinstance(other, (int, float, torch.SymInt, RankBool)) and not (
            isinstance(other, str) and isinstance(self, RankText)
        ):
            return NotImplemented
        values = {r: op(per_rank(self, r), per_rank(other, r)) for r in self.ranks()}
        if len(set(values.values())) == 1:
            return next(iter(values.values()))
        return RankBool(values, self.read)

    return method


class RankInt(torch.SymInt):
    """The program's rank (or an int computed from it): one value per simulated rank."""

    read: str

    def __init__(self, node, read: str):
        super().__init__(node)
        self.read = read

    def ranks(self):
        return self.node._local_ints.keys()

    def first(self) -> int:
        ints = self.node._local_ints
        return ints[min(ints)]

    for _n in _OPS:
        locals()[_n] = _arith(_n)
    for _n in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
        locals()[_n] = _compare(_n)
    del _n

    def __bool__(self):
        if _or_same(sys._getframe(1), self.node._local_ints):
            return True
        return HOOKS["decide"](RankBool({r: bool(v) for r, v in self.node._local_ints.items()}, self.read), 1)

    def _refuse(self, *args, **kwargs):
        raise refusal(self.read, f"used as one Python number at {user_site(1)}")

    def __index__(self):
        f = sys._getframe(1)
        if _formatting(f):  # "rank %d" % rank: a log line, rank 0's as it prints
            return self.first()
        same, index = HOOKS["same_item"](f, self.node._local_ints)  # seq[rank], one item for all
        if same:
            return index
        detail = _SAMPLER if f.f_code.co_filename.endswith(_SAMPLER_FILE) else ""
        raise refusal(self.read, f"used as one Python number at {user_site(1)}", detail)

    def __int__(self):
        if _formatting(sys._getframe(1)):
            return self.first()
        raise refusal(self.read, f"used as one Python number at {user_site(1)}")

    def __float__(self):
        if _formatting(sys._getframe(1)):
            return float(self.first())
        raise refusal(self.read, f"used as one Python number at {user_site(1)}")

    __complex__ = __round__ = __trunc__ = __floor__ = __ceil__ = _refuse
    __truediv__ = __rtruediv__ = _refuse

    def __hash__(self):
        raise refusal(self.read, f"hashed (a dict key or set member) at {user_site(1)}")

    def __reduce_ex__(self, protocol):
        raise refusal(self.read, f"sent as a Python object (pickled) at {user_site(1)}")

    def __repr__(self):
        return str(self.first())

    __str__ = __repr__

    def __format__(self, spec):
        return format(self.first(), spec)


_SAMPLER_FILE = os.path.join("torch", "utils", "data", "distributed.py")
_SAMPLER = (
    "a DistributedSampler picks each rank's samples in Python, one list per rank (as Lightning's and "
    "Accelerate's data loaders shard the data)"
)

_BINARY_OP = dis.opmap.get("BINARY_OP", -1)
_REMAINDER = (6, 19)  # NB_REMAINDER, NB_INPLACE_REMAINDER


def _or_same(f, ints: dict[int, int]) -> bool:
    """Is frame f running `rank or C` whose value is the rank on every rank (a rank whose value is
    falsy, 0, gets C == 0: Lightning's `_get_rank() or 0`)? Then the `or` keeps the RankInt."""
    if any(ints.values()) and all(v for v in ints.values()):
        return False  # never asked: every rank truthy is a plain True already
    ins = _instructions(f.f_code)
    at = next((k for k, i in enumerate(ins) if i.offset >= f.f_lasti), None)
    if at is None:
        return False
    # 3.11: JUMP_IF_TRUE_OR_POP end; LOAD_CONST C. 3.12+: COPY 1; [TO_BOOL]; POP_JUMP_IF_TRUE end; POP_TOP; LOAD_CONST C
    rest = [i for i in ins[at:] if i.opname not in ("TO_BOOL", "CACHE", "NOT_TAKEN")][:3]
    if rest and rest[0].opname == "JUMP_IF_TRUE_OR_POP":
        const, end = rest[1:2], rest[0].argval
    elif len(rest) == 3 and rest[0].opname == "POP_JUMP_IF_TRUE" and rest[1].opname == "POP_TOP":
        const, end = rest[2:3], rest[0].argval
    else:
        return False
    if not const or const[0].opname != "LOAD_CONST" or type(const[0].argval) is not int:
        return False
    after = ins.index(const[0]) + 1
    return after < len(ins) and ins[after].offset == end and all(v == const[0].argval for v in ints.values() if not v)


_INSTRUCTIONS: dict = {}


def _instructions(code) -> list:
    if code not in _INSTRUCTIONS:
        _INSTRUCTIONS[code] = list(dis.get_instructions(code))
    return _INSTRUCTIONS[code]


def _formatting(f) -> bool:
    """Is frame f running `text % args` (printf-style formatting asks %d's value by __index__)?"""
    code = f.f_code.co_code
    i = f.f_lasti
    return 0 <= i < len(code) - 1 and code[i] == _BINARY_OP and code[i + 1] in _REMAINDER


class RankBool:
    """A comparison of the rank whose outcome differs across the simulated ranks."""

    __slots__ = ("read", "values")

    def __init__(self, values: dict[int, bool], read: str):
        self.values, self.read = values, read

    def ranks(self):
        return self.values.keys()

    def first(self) -> bool:
        return self.values[min(self.values)]

    def __bool__(self):
        return HOOKS["decide"](self, 1)

    __eq__ = _compare("__eq__")
    __ne__ = _compare("__ne__")

    def _refuse(self, *args, **kwargs):
        raise refusal(self.read, f"used as one Python value at {user_site(1)}")

    __int__ = __index__ = __float__ = _refuse

    def __hash__(self):
        raise refusal(self.read, f"hashed (a dict key or set member) at {user_site(1)}")

    def __reduce_ex__(self, protocol):
        raise refusal(self.read, f"sent as a Python object (pickled) at {user_site(1)}")

    def __repr__(self):
        return repr(self.first())

    __str__ = __repr__


class RankText(str):
    """`$RANK` / `$LOCAL_RANK` as the program reads it: rank 0's text, one value per rank.
    `int()` of it is a RankInt where the program's `int` is commtrace's (see rank_reads); a
    comparison with text is per rank, as for a RankInt."""

    values: dict[int, str]
    read: str

    def __new__(cls, values: dict[int, str], read: str):
        self = super().__new__(cls, values[min(values)])
        self.values, self.read = values, read
        return self

    def ranks(self):
        return self.values.keys()

    def as_int(self, base: int = 10):
        return make({r: int(v, base) for r, v in self.values.items()}, self.read)

    def __int__(self):
        # the builtin int() of a module commtrace could not give its own `int` (see rank_reads):
        # CPython makes whatever this returns a plain int, so the rank cannot be carried from here
        return HOOKS["plain_int"](self, sys._getframe(1))

    __eq__ = _compare("__eq__")
    __ne__ = _compare("__ne__")

    def __hash__(self):
        raise refusal(self.read, f"hashed (a dict key or set member) at {user_site(1)}")

    def __reduce_ex__(self, protocol):
        raise refusal(self.read, f"sent as a Python object (pickled) at {user_site(1)}")
