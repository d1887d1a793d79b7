"""A branch on the rank in local mode: rank 0's observing branch runs, anything else is refused.

Local mode runs one Python, rank 0's. When a comparison of the rank that differs across the
simulated ranks decides a branch (`if rank == 0: print(...)`), `decide` lets rank 0's Python
take rank 0's side only when what the other ranks do instead cannot change what is recorded:

1. it is the test of an `if` statement (not a `while`, a conditional expression, an `assert`, a
   comprehension's filter, an `and` / `or` whose value is kept) with no `else` / `elif`;
2. rank 0 takes it and the test does not negate (no `not`, `not in`, `is not`): then a rank whose
   comparison is false skips the body (an `and` chain short-circuits), so the ranks that do not
   run the body are exactly the ranks that would not on a real run, and nothing runs for them;
3. the body does not leave the branch (`return`, `break`, `continue`) and leaves no value behind:
   no name, attribute or item it sets is read after it outside branches with the same test
   (a progress bar created and updated under `if rank == 0:` is fine) — read from the source;
4. while it runs (rank 0 alone), it issues no collective, writes no tensor that existed before it,
   and draws no random numbers (each would change rank 0's later values or communication only):
   checked on every op it dispatches (local/ops.py), calls made from it included.
   A tensor read in it (`loss.item()` for a log line) is rank 0's value, as rank 0 prints it.

Two function shapes that rank-zero-only helpers take are such branches too: a guard clause
`if rank != 0: return` at the top of a function (the rest of the function is rank 0's body), and
`if rank == 0: return fn(*args)` followed by `return default` (Lightning's `rank_zero_only`);
the value rank 0 returns must be the other ranks' or be dropped by the caller (`_guard`, `_tail`).

Anything else is refused in one line naming the rank read, the branch and why (rank_values'
one rule). Python state a call inside the body changes in objects (not tensors) is not followed.
"""

from __future__ import annotations

import ast
import sys
import weakref
from typing import Any

from tracer.local import rank_kept, rank_values
from tracer.local.rank_values import RankBool, refusal, rel

ACTIVE: list[_Branch] = []
"""Rank-0 branches running now (innermost last)."""


def decide(rb: RankBool, depth: int) -> bool:
    """bool() of a RankBool whose ranks disagree, asked from `depth` frames up."""
    first = rb.first()
    if ACTIVE:  # inside a rank-0 body already: everything here is rank 0's Python, checked
        return first
    f = sys._getframe(depth + 1)
    if rank_kept.keep(f, rb):  # `name = rank == 0 and ...`: the name is set per rank after it
        return first
    path = f.f_code.co_filename
    site = f"{rel(path)}:{f.f_lineno}"
    key = (f.f_code, f.f_lasti)
    if key not in _JUDGED:  # the source's verdict on this branch, the same every time it runs
        _JUDGED[key] = _judge(f, path)
    node, why, tail = _JUDGED[key]
    guard = _guard(_SCOPES.get(id(node)), node) if node is not None and not first else None
    if guard is not None:  # `if rank != 0: return`: the rest of the function is rank 0's body
        scope = _SCOPES[id(node)]
        _Branch(f, node, rb.read, site, guard, last_line=scope.end_lineno or node.lineno).start()
        return first
    if why is None and not first:
        why = f"rank 0 skips the body other ranks run ({rel(path)}:{node.body[0].lineno})"
    if why is not None:
        raise refusal(rb.read, f"branched on at {site}", why)
    _Branch(f, node, rb.read, site, tail).start()
    return first


rank_values.HOOKS["decide"] = decide

_JUDGED: dict = {}
"""(code, instruction) -> (the `if`, None or why the source refuses it, its function's tail
return when the body returns: see `_tail`)."""


def _judge(f, path: str) -> tuple:
    node, why = _verdict(f, path)
    scope = _SCOPES.get(id(node))
    return node, why, (_tail(scope, node) if node is not None and scope is not None else None)


_SCOPES: dict = {}


def _verdict(f, path: str) -> tuple:
    tree = _tree(path)
    node, scope = _if_at(tree, f) if tree is not None else (None, None)
    if node is None or scope is None:
        return None, "only the test of an `if` that rank 0 alone enters may depend on the rank"
    _SCOPES[id(node)] = scope
    if node.orelse:
        return node, "the ranks take different sides of an if/else"
    if _negates(node.test):
        return node, f"rank 0 skips the body other ranks run ({rel(path)}:{node.body[0].lineno})"
    leaves = _leaves(node)
    if leaves is not None and _tail(scope, node) is None:
        return node, f"rank 0 alone leaves with `{leaves[0]}` at {rel(path)}:{leaves[1]}"
    escape = _escapes(scope, node)
    if escape is not None:
        name, set_at, read_at = escape
        return (
            node,
            f"rank 0 alone sets `{name}` at {rel(path)}:{set_at}, read after the branch at {rel(path)}:{read_at}",
        )
    return node, None


class _Branch:
    """A rank-0 branch being run: from its test until the frame leaves the `if`."""

    def __init__(
        self, frame, node: ast.If, read: str, site: str, tail: ast.Return | None = None, last_line: int | None = None
    ):
        self.frame, self.node, self.read, self.site = frame, node, read, site
        self.tail = tail
        """The function's return the other ranks reach, where the body returns (see `_tail`), or
        the guard's return they take (see `_guard`: then the branch runs to the function's end)."""
        self.first_line = node.lineno
        self.last_line = last_line or node.end_lineno or node.lineno
        self.fresh: weakref.WeakSet = weakref.WeakSet()
        """Tensors made inside the branch (writing them changes nothing outside it)."""
        self.prev_global: Any = None
        self.prev_local: Any = None

    def start(self) -> None:
        self.prev_global, self.prev_local = sys.gettrace(), self.frame.f_trace
        self.frame.f_trace_lines = True
        self.frame.f_trace = self._trace
        ACTIVE.append(self)
        sys.settrace(self._global)

    def _global(self, frame, event, arg):
        return self.prev_global(frame, event, arg) if self.prev_global is not None else None

    def _trace(self, frame, event, arg):
        if event == "line" and self.first_line <= frame.f_lineno <= self.last_line:
            return self._trace
        if event == "return" and self.tail is not None:
            self.finish()
            self._check_return(frame, arg)
            local = self.prev_local
            return local(frame, event, arg) if local is not None else None
        if event in ("line", "return"):
            self.finish()
            local = self.prev_local
            return local(frame, event, arg) if local is not None else None
        return self._trace

    def finish(self) -> None:
        if self in ACTIVE:
            ACTIVE.remove(self)
        self.frame.f_trace = self.prev_local
        sys.settrace(self.prev_global)

    def _check_return(self, frame, value) -> None:
        """Rank 0 returned `value` from the body; the other ranks return the tail's value. The
        same object, or a caller that drops it (`rank_zero_info(...)` as a statement): nothing
        differs after the call. Else refused: rank 0's caller would go on with its own value."""
        tail = self.tail
        assert tail is not None
        if isinstance(tail.value, ast.Name):
            name = tail.value.id
            scope = frame.f_locals if name in frame.f_locals else frame.f_globals
            other = scope.get(name, frame.f_builtins.get(name))
        else:
            other = tail.value.value if isinstance(tail.value, ast.Constant) else None
        if value is other or _dropped(frame.f_back):
            return
        where = f"{rel(frame.f_code.co_filename)}:{tail.lineno}"
        raise refusal(
            self.read,
            f"branched on at {self.site}",
            f"rank 0 alone returns {type(value).__name__} where the other ranks return {other!r} ({where})",
        )

    def refuse(self, what: str, where: str):
        """The one-line refusal of something rank 0 alone did inside this branch."""
        self.finish()
        return refusal(self.read, f"branched on at {self.site}", f"rank 0 alone {what} at {where}")


def finish_all() -> None:
    """The program ended (or failed) inside a rank-0 branch."""
    while ACTIVE:
        ACTIVE[-1].finish()


_TREES: dict[str, ast.Module | None] = {}


def _tree(path: str) -> ast.Module | None:
    if path not in _TREES:
        try:
            with open(path) as fh:
                _TREES[path] = ast.parse(fh.read(), path)
        except (OSError, SyntaxError, ValueError):
            _TREES[path] = None
    return _TREES[path]


def _contains(node: ast.AST, line: int, col: int | None) -> bool:
    start, end = (node.lineno, node.col_offset), (node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]
    if col is None:
        return start[0] <= line <= end[0]
    return start <= (line, col) < end or (start[0] <= line <= end[0] and start == end)


def _if_at(tree: ast.Module, f) -> tuple[ast.If | None, ast.AST | None]:
    """The `if` whose test is being evaluated in frame f (innermost), and its scope."""
    line, col = f.f_lineno, None
    try:
        pos = list(f.f_code.co_positions())[f.f_lasti // 2]
        if pos[0] is not None and pos[2] is not None:
            line, col = pos[0], pos[2]
    except (IndexError, AttributeError):
        pass
    best: tuple[ast.If | None, ast.AST | None] = (None, None)

    def visit(node: ast.AST, scope: ast.AST) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if not _contains_lines(child, line):
                continue
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else scope
            # a jump's position is the test's, or (an `and` / `or` operand) the whole statement's
            if isinstance(child, ast.If) and (
                _contains(child.test, line, col) or (child.lineno, child.col_offset) == (line, col)
            ):
                best = (child, scope)
            visit(child, inner)

    visit(tree, tree)
    if best[0] is not None and not _own_test(best[0].test, line, col):
        return None, None
    return best


def _contains_lines(node: ast.AST, line: int) -> bool:
    lo = getattr(node, "lineno", None)
    if lo is None:
        return True  # a node without a position (arguments, comprehension): look inside
    return lo <= line <= (getattr(node, "end_lineno", None) or lo)


def _own_test(test: ast.expr, line: int, col: int | None) -> bool:
    """The bool() asked for is the test's own (an operand of `and` / `or` / `not`, or the whole
    test), not a value computed inside it (a call's argument, a subscript, a conditional)."""
    if col is None:
        return True
    for n in ast.walk(test):
        if isinstance(n, (ast.IfExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) and _contains(
            n, line, col
        ):
            return False
    return True


def _negates(test: ast.expr) -> bool:
    for n in ast.walk(test):
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return True
        if isinstance(n, ast.Compare) and any(isinstance(op, (ast.NotIn, ast.IsNot)) for op in n.ops):
            return True
    return False


def _own_nodes(stmts: list[ast.stmt], loops: bool = True):
    """Nodes of these statements in their own scope (not inside nested functions or classes;
    with loops=False, not inside nested loops either)."""
    stack: list[ast.AST] = list(stmts)
    while stack:
        n = stack.pop()
        yield n
        for c in ast.iter_child_nodes(n):
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if not loops and isinstance(c, (ast.For, ast.AsyncFor, ast.While)):
                continue
            stack.append(c)


def _leaves(node: ast.If) -> tuple[str, int] | None:
    for n in _own_nodes(node.body):
        if isinstance(n, ast.Return):
            return "return", n.lineno
    for n in _own_nodes(node.body, loops=False):
        if isinstance(n, (ast.Break, ast.Continue)):
            return type(n).__name__.lower(), n.lineno
    return None


def _tail(scope: ast.AST | None, node: ast.If) -> ast.Return | None:
    """A rank-zero-only guard (Lightning's `rank_zero_only`, Accelerate's `on_main_process`):
    `if rank == 0: ...; return fn(*args, **kwargs)` at the top of a function whose only statement
    after it is `return` of a constant or a name (or none: None). The other ranks return that;
    rank 0 returns the body's value, checked when it does (`_Branch._check_return`)."""
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) or node not in scope.body:
        return None
    if not isinstance(node.body[-1], ast.Return):
        return None
    if any(isinstance(n, ast.Return) for s in node.body[:-1] for n in _own_nodes([s])):
        return None
    after = scope.body[scope.body.index(node) + 1 :]
    if not after:
        return ast.Return(value=ast.Constant(value=None), lineno=node.end_lineno or node.lineno)
    if len(after) == 1 and isinstance(after[0], ast.Return):
        value = after[0].value
        if value is None:
            return ast.Return(value=ast.Constant(value=None), lineno=after[0].lineno)
        if isinstance(value, (ast.Constant, ast.Name)):
            return after[0]
    return None


def _guard(scope: ast.AST | None, node: ast.If) -> ast.Return | None:
    """A guard clause rank 0 passes: `if rank != 0: return` at the top of a function, no else,
    its body one `return` of nothing, a constant or a name (torchtune's `deprecated` warning). The
    other ranks return that; rank 0 runs the rest of the function alone, as a rank-0 body (its
    ops checked, its result the others' or dropped by the caller: `_Branch._check_return`)."""
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) or node not in scope.body or node.orelse:
        return None
    if len(node.body) != 1 or not isinstance(node.body[0], ast.Return):
        return None
    value = node.body[0].value
    return node.body[0] if value is None or isinstance(value, (ast.Constant, ast.Name)) else None


def _dropped(caller) -> bool:
    """Does the caller's frame drop what the call it is in returns (a call as a statement)?"""
    if caller is None:
        return False
    ins = rank_values._instructions(caller.f_code)
    at = next((k for k, i in enumerate(ins) if i.offset > caller.f_lasti), None)
    return at is not None and ins[at].opname == "POP_TOP"


def _stored(n: ast.AST) -> tuple[str, int] | None:
    """The name a store in the body binds or changes (`x = `, `x.a = `, `x[i] = `, `import x`)."""
    if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
        return n.id, n.lineno
    if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, (ast.Store, ast.Del)):
        base = n.value
        while isinstance(base, (ast.Attribute, ast.Subscript)):
            base = base.value
        return (base.id, n.lineno) if isinstance(base, ast.Name) else None
    return None


def _escapes(scope: ast.AST, node: ast.If) -> tuple[str, int, int] | None:
    """(name, line set in the body, line read after it) for the first value the body leaves."""
    stores: dict[str, int] = {}
    for n in _own_nodes(node.body):
        s = _stored(n)
        if s is not None:
            stores.setdefault(*s)
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            for a in n.names:
                stores.setdefault((a.asname or a.name).split(".")[0], n.lineno)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node:
            stores.setdefault(n.name, n.lineno)
    if not stores:
        return None
    body = [(s.lineno, s.end_lineno or s.lineno) for s in node.body]
    same = ast.dump(node.test)
    guarded = [
        (n.body[0].lineno, n.body[-1].end_lineno or n.body[-1].lineno)
        for n in ast.walk(scope)
        if isinstance(n, ast.If) and ast.dump(n.test) == same
    ] + body
    loops = [n for n in ast.walk(scope) if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]
    scope_body = scope.body if isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)) else []
    own = set(map(id, _own_nodes(scope_body)))
    outside_stores: dict[str, list[int]] = {}
    for n in _own_nodes(scope_body):
        s = _stored(n)
        if s is not None and not any(lo <= s[1] <= hi for lo, hi in body):
            outside_stores.setdefault(s[0], []).append(s[1])
    end = node.end_lineno or node.lineno
    for n in ast.walk(scope):
        if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in stores):
            continue
        line = n.lineno
        if any(lo <= line <= hi for lo, hi in guarded):
            continue
        kills = outside_stores.get(n.id, [])
        if id(n) in own:  # flow within the scope: a store in between hides the body's value
            if line > end:
                if any(end < k < line for k in kills):
                    continue
            else:
                around = [lp for lp in loops if lp.lineno <= line and (lp.end_lineno or 0) >= end]
                if not around or any(max(lp.lineno for lp in around) <= k < line for k in kills):
                    continue
        return n.id, stores[n.id], line
    return None
