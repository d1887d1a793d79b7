"""Where a rank value meets code that takes one Python value, beyond rank_values' arithmetic.

- A rank's own device (`dist.barrier(device_ids=[local_rank])`, as Accelerate's
  `wait_for_everyone` and NCCL programs pass it): it picks the device the collective runs on,
  not what is communicated, and local mode runs every simulated rank on one device: rank 0's.
- An index into a Python sequence (`self.parallel_devices[self.local_rank]`, Lightning's root
  device on CPU: `[cpu, cpu, cpu, cpu]`) whose item is the same object-equal value at every
  rank's index answers that item: what the program holds afterwards is the same on every rank.
- A rank value reaching torch's C++ anywhere else (a pybind11 / torch argument parser
  TypeError, whose text shows a RankInt as the plain number it prints as) is refused in one
  line naming the call that passed it (`refusal_of_binding`).
"""

from __future__ import annotations

import ast
import functools
import traceback
from types import FrameType
from typing import Any

import torch.distributed as dist

from tracer.capture.patches import Patcher
from tracer.local import rank_values
from tracer.local.rank_values import RankBool, RankInt, RankText, refusal, rel


def install(p: Patcher) -> None:
    orig = dist.barrier

    @functools.wraps(orig)
    def barrier(*args, **kwargs):
        ids = kwargs.get("device_ids")
        if isinstance(ids, (list, tuple)):
            kwargs["device_ids"] = [v.first() if isinstance(v, RankInt) else v for v in ids]
        return orig(*args, **kwargs)

    p.everywhere(orig, barrier)
    p.set(dist.distributed_c10d, "barrier", barrier)


_TREES: dict = {}


def same_item(f: FrameType, ints: dict[int, int]):
    """(True, item) when frame f is indexing a Python sequence by the rank (`seq[rank]`, `seq` a
    name or attribute chain: read again without running anything but attribute reads) and every
    rank's item equals rank 0's; else (False, None)."""
    node = _subscript_at(f)
    if node is None:
        return False, None
    try:
        seq = _evaluate(node.value, f)
        items = [seq[v] for v in ints.values()]
    except Exception:  # noqa: BLE001 - not a plain sequence read: the caller refuses as before
        return False, None
    first = items[0]
    if all(type(i) is type(first) and i == first for i in items[1:]):
        return True, ints[min(ints)]
    return False, None


def _subscript_at(f: FrameType) -> ast.Subscript | None:
    path = f.f_code.co_filename
    if path not in _TREES:
        try:
            with open(path) as fh:
                _TREES[path] = ast.parse(fh.read(), path)
        except (OSError, SyntaxError, ValueError):
            _TREES[path] = None
    tree = _TREES[path]
    try:
        code: Any = f.f_code  # co_positions: Python 3.11
        pos = list(code.co_positions())[f.f_lasti // 2]
    except (IndexError, AttributeError):
        return None
    if tree is None or pos[0] is None:
        return None
    line, end_line, col, end_col = pos
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Subscript)
            and isinstance(n.ctx, ast.Load)
            and (n.lineno, n.col_offset, n.end_lineno, n.end_col_offset) == (line, col, end_line, end_col)
        ):
            return n
    return None


def _evaluate(expr: ast.expr, f: FrameType):
    """A name or an attribute chain (`self.parallel_devices`) read in frame f."""
    if isinstance(expr, ast.Attribute):
        return getattr(_evaluate(expr.value, f), expr.attr)
    if isinstance(expr, ast.Name):
        if expr.id in f.f_locals:
            return f.f_locals[expr.id]
        if expr.id in f.f_globals:
            return f.f_globals[expr.id]
        return f.f_builtins[expr.id]
    raise ValueError("not a name or attribute chain")


_BINDING_WORDS = ("incompatible function arguments", "must be", "expected", "argument")


def refusal_of_binding(e: BaseException) -> str | None:
    """The one-line refusal when a TypeError from torch's C++ was handed a rank value: the
    innermost Python frame (the call into C++) holds a RankInt / RankBool / RankText in its
    locals (itself or inside a list, tuple or dict), or the last RankInt was made on the line of
    that call (an argument computed in it). None when neither."""
    if not isinstance(e, TypeError) or not any(w in str(e) for w in _BINDING_WORDS):
        return None
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    frame = tb.tb_frame
    found = next((v.read for v in map(_rank_value, frame.f_locals.values()) if v is not None), None)
    if found is None and (id(frame), frame.f_code, tb.tb_lineno) in rank_values.LAST_MADE:
        found = rank_values.LAST_READ[0]  # made by a call in the failing line's own arguments
    if found is None:
        return None
    summary = traceback.extract_tb(tb)[-1]
    call = (summary.line or "").strip()
    where = f"{rel(summary.filename)}:{summary.lineno} in {summary.name}"
    user = _user_line(e)
    called = f", called from {user}" if user and user != f"{rel(summary.filename)}:{summary.lineno}" else ""
    use = f"passed to a C++ binding at {where} (`{call}`){called}"
    return str(refusal(found, use, "a binding takes one Python value per process"))


def _rank_value(v, depth: int = 0):
    if isinstance(v, (RankInt, RankBool, RankText)):
        return v
    if depth < 2 and isinstance(v, (list, tuple)):
        return next((r for r in (_rank_value(x, depth + 1) for x in v) if r is not None), None)
    if depth < 2 and isinstance(v, dict):
        return next((r for r in (_rank_value(x, depth + 1) for x in v.values()) if r is not None), None)
    return None


def _user_line(e: BaseException) -> str:
    is_user = rank_values._USER_CODE[0]
    tb = e.__traceback__
    last = ""
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user is not None and is_user(code) and "site-packages" not in code.co_filename:
            last = f"{rel(code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return last


rank_values.HOOKS["same_item"] = same_item
