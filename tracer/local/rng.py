"""Random number generators per simulated rank under LocalTensorMode, as each rank's process has.

LocalTensorMode (torch 2.13) keeps one state of the *default* CPU generator per simulated rank
(`_per_rank_rng_states`, reseeded by its patched `torch.manual_seed`, per rank for a per-rank
`SymInt` seed) and runs every op once per rank with that rank's state. An explicit
`torch.Generator` has no such book: the op runs rank after rank on the one object, so rank 0
draws first and every other simulated rank gets the generator's *later* draws, where on a real
run each rank's own generator (seeded the same way) gives the same draw.

Here each explicit generator an op is given gets a state per simulated rank: the op runs rank r
with rank r's state (`_map_to_rank_local_val`, called once per argument per rank, is where the
rank's state is put in), and the object is left in rank 0's state, which is what the program's
one Python (rank 0's) then sees (`g.get_state()`, `g.initial_seed()`). A generator the program
reseeds or sets between ops (`g.manual_seed(s)`, `g.set_state(...)`: its state is no longer the
one it was left in) starts again from that state on every rank, as it would on each rank.

The default generator set behind LocalTensorMode's back (`torch.set_rng_state`,
`torch.default_generator.manual_seed`, `torch.random.fork_rng` restoring it) is followed the same
way: a change LocalTensorMode did not make starts every rank from the new state.
"""

from __future__ import annotations

import weakref

import torch
import torch.distributed._local_tensor as lt
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from tracer.capture.patches import Patcher


class _Book:
    """Per-rank states of one generator, and the state the object was left in."""

    __slots__ = ("left", "states")

    def __init__(self, state: torch.Tensor, ranks):
        self.states = {r: _clone(state) for r in ranks}
        self.left = state


_BOOKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_RUNNING: list = []
"""[(generator, book, [rank that last ran or None])] for the op being run rank after rank."""
_DEFAULT_LEFT: list = [None]
"""The default generator's state as LocalTensorMode last left it (None: not yet seen)."""


def _book(g: torch.Generator, ranks) -> _Book:
    now = g.get_state()
    book = _BOOKS.get(g)
    if book is None or not _equal(book.left, now) or set(book.states) != set(ranks):
        book = _BOOKS[g] = _Book(now, ranks)  # new, or reseeded / set by the program since
    return book


def install(p: Patcher) -> None:
    """Per-rank explicit generators and default-generator changes made outside LocalTensorMode."""
    orig_run = lt._for_each_rank_run_func
    orig_map = lt._map_to_rank_local_val

    def for_each_rank(func, ranks, args, kwargs, **kw):
        if torch.Tag.nondeterministic_seeded not in getattr(func, "tags", ()) or lt._is_in_fake_tensor_mode():
            # no draw (so no generator argument, and the default generator's per-rank states stay
            # as they are), or shapes only (DTensor's propagation under FakeTensorMode)
            return orig_run(func, ranks, args, kwargs, **kw)
        lm = lt.enabled_local_tensor_mode()
        if lm is not None and lm._per_rank_rng_states:
            _follow_default(lm)
        gens = [
            a
            for a in pytree.tree_leaves((args, kwargs))
            if isinstance(a, torch.Generator) and a is not torch.default_generator
        ]
        if not gens:
            out = orig_run(func, ranks, args, kwargs, **kw)
            _left_default(lm)
            return out
        running = [(g, _book(g, ranks), [None]) for g in gens]
        _RUNNING.append(running)
        try:
            out = orig_run(func, ranks, args, kwargs, **kw)
        finally:
            _RUNNING.pop()
            for g, book, last in running:
                if last[0] is not None:
                    book.states[last[0]] = g.get_state()
                first = min(book.states)
                g.set_state(book.states[first])  # the program's Python is rank 0's
                book.left = _clone(book.states[first])
        _left_default(lm)
        return out

    def map_to_rank(val, rank):
        if _RUNNING and isinstance(val, torch.Generator):
            for g, book, last in _RUNNING[-1]:
                if g is val:
                    if last[0] is not None and last[0] != rank:
                        book.states[last[0]] = g.get_state()
                    if last[0] != rank:
                        g.set_state(book.states[rank])
                        last[0] = rank
                    return val
        return orig_map(val, rank)

    orig_seed = lt._LocalRandom.torch_manual_seed

    def manual_seed(seed):
        from tracer.local import rank_branch
        from tracer.local.rank_values import user_site

        if rank_branch.ACTIVE:  # rank 0 alone reseeds: its later draws would differ from the others'
            raise rank_branch.ACTIVE[-1].refuse("seeds the random generator", user_site(1))
        out = orig_seed(seed)
        _left_default(lt.enabled_local_tensor_mode())  # LocalTensorMode's own change, per rank
        return out

    p.set(lt._LocalRandom, "torch_manual_seed", staticmethod(manual_seed))
    p.set(lt, "_for_each_rank_run_func", for_each_rank)
    p.set(lt, "_map_to_rank_local_val", map_to_rank)
    _DEFAULT_LEFT[0] = None


def _follow_default(lm) -> None:
    """The default generator changed since LocalTensorMode last left it: the program set or
    reseeded it directly; every rank starts from the new state, as every rank's process would."""
    left = _DEFAULT_LEFT[0]
    if left is None:
        return
    now = torch.get_rng_state()
    if not _equal(now, left):
        for r in lm.ranks:
            cpu, accel = lm._per_rank_rng_states[r]
            lm._per_rank_rng_states[r] = (_clone(now), accel)


def _left_default(lm) -> None:
    if lm is not None and lm._per_rank_rng_states:
        _DEFAULT_LEFT[0] = torch.get_rng_state()


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    # generator states are plain byte tensors: compared as bytes, outside any dispatch mode (a
    # FakeTensorMode may be on: DTensor's propagation), in microseconds (this runs on every op)
    return a.numpy().tobytes() == b.numpy().tobytes()


def _clone(t: torch.Tensor) -> torch.Tensor:
    with _disable_current_modes():
        return t.clone()
