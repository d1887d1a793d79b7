"""A rank comparison kept in a name through `and`: `zero = trainer.local_rank == 0 and node == 0`.

Python's `and` keeps one of its operands: on rank 0 (whose comparison is true) the name gets the
right operand's value, on the other ranks the comparison's False. rank 0's Python computes only
its own, so after the assignment the name is set to the per-rank value (a RankBool where ranks
differ): later tests of it are judged like any rank comparison (rank_branch), instead of the
assignment being refused. Only where the right operand is a bool on rank 0 (a RankBool or a
plain bool): a plain value there is the same on every rank whose comparison holds, as every
rank reads it alike (a rank-dependent one would itself be a RankBool).

Lightning's `prepare_data` keeps `global_rank_zero = trainer.local_rank == 0 and
trainer.node_rank == 0` this way. Python 3.11's frames: a function's fast locals are written
back with PyFrame_LocalsToFast.
"""

from __future__ import annotations

import ast
import ctypes
import dis
import sys

from tracer.local import rank_values
from tracer.local.rank_values import RankBool, refusal, rel

_JUMP = "JUMP_IF_FALSE_OR_POP"
_STORES = ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF")


def keep(f, rb: RankBool) -> bool:
    """bool(rb) asked by `name = rb and ...` in frame f, rank 0's comparison true: follow the
    assignment and set the name per rank after it (see the module docstring)."""
    if not rb.first():
        return False
    ins = rank_values._instructions(f.f_code)
    at = next((k for k, i in enumerate(ins) if i.offset >= f.f_lasti), None)
    if at is None or ins[at].opname != _JUMP:
        return False
    target = next((i for i in ins if i.offset == ins[at].argval), None)
    if target is None or target.opname not in _STORES or not _plain_assign(f, target):
        return False
    _Kept(f, rb, target).start()
    return True


def _plain_assign(f, store) -> bool:
    """Is the store `NAME = a and b` (one name, an `and` only), as the source says?"""
    line = store.positions.lineno if store.positions is not None else None
    if line is None:
        return False
    try:
        with open(f.f_code.co_filename) as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return False
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and n.lineno <= line <= (n.end_lineno or n.lineno):
            return (
                len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id == store.argval
                and isinstance(n.value, ast.BoolOp)
                and isinstance(n.value.op, ast.And)
            )
    return False


class _Kept:
    """Follows frame f until the store has run, then writes the per-rank value."""

    def __init__(self, f, rb: RankBool, store: dis.Instruction):
        self.frame, self.rb, self.store = f, rb, store
        self.prev_global = sys.gettrace()
        self.prev_local = f.f_trace

    def start(self) -> None:
        self.frame.f_trace_lines = True
        self.frame.f_trace = self._trace
        sys.settrace(self._global)

    def _global(self, frame, event, arg):
        return self.prev_global(frame, event, arg) if self.prev_global is not None else None

    def _trace(self, frame, event, arg):
        if event == "line" and frame.f_lasti > self.store.offset or event == "return":
            self.frame.f_trace = self.prev_local
            sys.settrace(self.prev_global)
            if event == "line":
                self._write()
            local = self.prev_local
            return local(frame, event, arg) if local is not None else None
        return self._trace

    def _write(self) -> None:
        f, name, op = self.frame, self.store.argval, self.store.opname
        scope = f.f_globals if op == "STORE_GLOBAL" or (op == "STORE_NAME" and f.f_locals is f.f_globals) else None
        got = (scope if scope is not None else f.f_locals).get(name)
        if not isinstance(got, (bool, RankBool)):  # the others' False beside rank 0's object
            raise refusal(
                self.rb.read,
                f"kept by `and` at {rel(f.f_code.co_filename)}:{f.f_lineno - 1}",
                f"`{name}` would be {type(got).__name__} on rank 0 and False on the others",
            )
        values = {r: (rank_values.per_rank(got, r) if v else v) for r, v in self.rb.values.items()}
        new = values[min(values)] if len(set(values.values())) == 1 else RankBool(values, self.rb.read)
        if scope is not None:
            scope[name] = new
            return
        f.f_locals[name] = new
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(f), ctypes.c_int(0))
