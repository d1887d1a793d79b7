"""Hooks on the torch.distributed Python entry points that are not collectives themselves:
process-group creation, DeviceMesh construction and slicing, DTensor redistribution, and the
p2p / batching wrappers. Each hook calls the original and writes one event per rank.

Functions imported by name elsewhere in torch (e.g. `redistribute_local_tensor`) are replaced
in every loaded torch.distributed module, so no call path is missed.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from tracer.capture import process_group as rpg
from tracer.capture import watchdog
from tracer.capture.recorder import GroupRef, Recorder, RecordError

_tls = threading.local()


_HOLDERS: dict[int, list] = {}
"""id(function) -> [(module, name)] over the torch.distributed modules scanned so far, for the
whole process: a recording forked from the fork server (tracer/executors/local.py preloads
tracer.capture.preloaded, which scans) starts with it, instead of scanning ~150 modules (~9 ms)."""
_SCANNED: set[str] = set()
_SCANNED_AT: list[tuple[int, str | None]] = [(0, None)]


def index_loaded_modules() -> dict[int, list]:
    """Add the torch.distributed modules imported since the last call to _HOLDERS. Entries may
    be stale (an attribute rebound since): everywhere() checks each one before replacing it."""
    # nothing imported since the last scan (install calls this ~13 times): the same number of
    # modules and the same newest one (sys.modules keeps insertion order)
    mark = (len(sys.modules), next(reversed(sys.modules), None))
    if mark == _SCANNED_AT[0]:
        return _HOLDERS
    _SCANNED_AT[0] = mark
    for mod_name in sys.modules.keys() - _SCANNED:  # a set difference: ~3,000 names, at C speed
        _SCANNED.add(mod_name)
        mod = sys.modules.get(mod_name)
        if mod is not None and (mod_name == "torch" or mod_name.startswith("torch.distributed")):
            for attr, value in list(vars(mod).items()):
                if callable(value):
                    _HOLDERS.setdefault(id(value), []).append((mod, attr))
    return _HOLDERS


class Patcher:
    """Replaces attributes and puts them back."""

    def __init__(self):
        self._undo: list[tuple[Any, str, Any]] = []

    def set(self, owner, name: str, value) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def everywhere(self, orig: Callable, new: Callable) -> None:
        """Replace `orig` in every loaded torch.distributed module that holds it by name."""
        for mod, attr in index_loaded_modules().get(id(orig), ()):
            if getattr(mod, attr, None) is orig:
                self.set(mod, attr, new)

    def undo(self) -> None:
        for owner, name, value in reversed(self._undo):
            setattr(owner, name, value)
        self._undo.clear()


def install(p: Patcher, rec: Recorder, *, rank: int, world_size: int) -> None:
    """Hook everything; `rank` is the process's own rank (0 in local mode)."""
    rpg.register_backend()
    rpg.RecordingProcessGroup.recorder = rec
    _install_init(p, rec, rank=rank, world_size=world_size)
    _install_groups(p, rec)
    _install_mesh(p, rec)
    _install_dtensor(p, rec)
    _install_p2p(p, rec)
    _install_fsdp(p, rec)


# ---- process groups ------------------------------------------------------------------------
def _others(members: tuple[int, ...], me: int) -> tuple[int, ...]:
    """The members a rank creating a group waits for (all of them when it is not one)."""
    return tuple(r for r in members if r != me)


def _install_init(p: Patcher, rec: Recorder, *, rank: int, world_size: int) -> None:
    orig = c10d.init_process_group

    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def init_process_group(*args, **kwargs):
        asked = sig.bind(*args, **kwargs).arguments
        size = asked.get("world_size", -1)
        if size not in (None, -1) and int(size) != world_size:
            raise RecordError(
                f"the program calls init_process_group(world_size={size}) "
                f"but the recording simulates {world_size} ranks (--world-size)"
            )
        keep = {k: asked[k] for k in ("timeout", "group_name") if k in asked}
        # fake and real mode: the recording backend (real: on gloo, over the store every rank
        # process shares). local mode: torch's own fake backend, because LocalTensorMode only
        # computes collectives that reach the dispatcher, and the c10d API calls a Python process
        # group's methods directly, around it; capture is in tracer/local/ops.py
        backend = "fake" if rec.mode == "local" else rpg.BACKEND
        shared = rpg.RecordingProcessGroup.store
        store = shared() if rec.mode == "real" and shared is not None else dist.HashStore()
        orig(backend=backend, store=store, rank=rank, world_size=world_size, **keep)
        pg = c10d._get_default_group()
        g = GroupRef(str(pg.group_name), tuple(range(world_size)), "default_pg")
        rec.note_group("init_process_group", g, {"api": "init_process_group"})

    p.everywhere(orig, init_process_group)


def _install_groups(p: Patcher, rec: Recorder) -> None:
    orig_name = c10d._process_group_name

    def _process_group_name(ranks, use_hashed_name):
        name = orig_name(ranks, use_hashed_name)
        _tls.last_name = str(name)
        return name

    p.set(c10d, "_process_group_name", _process_group_name)

    orig_new = c10d._new_group_with_tag

    @functools.wraps(orig_new)
    def _new_group_with_tag(ranks=None, timeout=None, backend=None, backend_options=None, *args, **kwargs):
        _tls.last_name = None
        # whatever backend a group names ("gloo" side groups, "cpu:gloo,cuda:nccl", NCCL options),
        # it is served as the default group is: recorded, by the mode's backend (a real gloo
        # group would wait for peers on a store no other rank process shares in fake mode, and
        # would not be recorded in real mode). DeviceMesh's "fake" groups (dims it disables)
        # stay torch's fake groups: they never communicate.
        if str(backend).lower() != "fake":
            backend, backend_options = None, None
        world = c10d._get_default_group().size()
        members = tuple(sorted(ranks)) if ranks else tuple(range(world))
        me = c10d._get_default_group().rank()
        with watchdog.blocking(
            "new_group", f"a new group (ranks {watchdog.ranks_text(members)})", _others(members, me)
        ):
            pg = orig_new(ranks, timeout, backend, backend_options, *args, **kwargs)
        if getattr(_tls, "quiet", False):
            return pg
        if kwargs.get("sort_ranks") is False and ranks:
            members = tuple(ranks)
        desc = kwargs.get("group_desc") or "undefined"
        name = _tls.last_name if _tls.last_name is not None else str(getattr(pg, "group_name", "?"))
        rec.note_group("new_group", GroupRef(name, members, desc), {"api": "new_group"})
        return pg

    p.set(c10d, "_new_group_with_tag", _new_group_with_tag)

    orig_split = c10d.split_group

    @functools.wraps(orig_split)
    def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None, group_desc=None, backend=None):
        subs = [tuple(sorted(sub)) for sub in split_ranks or []]
        names = {sub: c10d._hash_ranks_to_str(list(sub)) for sub in subs}  # before any is created
        me = dist.get_rank()
        if torch.accelerator.is_available():
            pg = orig_split(parent_pg, split_ranks, timeout, pg_options, group_desc, backend)
        else:
            # torch splits only accelerator communicators; on a CPU dry run, create this rank's
            # subgroup with new_group's local synchronization, which names it by the same hash
            mine = next((list(sub) for sub in subs if me in sub), None)
            _tls.quiet = True
            try:
                pg = (
                    c10d._new_group_with_tag(
                        mine, timeout=timeout, use_local_synchronization=True, group_desc=group_desc
                    )
                    if mine is not None
                    else None
                )
            finally:
                _tls.quiet = False
        for sub in subs:
            on = [r for r in rec.ranks if r in sub]
            if on:
                name = str(pg.group_name) if pg is not None and me in sub else names[sub]
                g = GroupRef(name, sub, group_desc or "undefined")
                rec.note_group("split_group", g, {"api": "split_group"}, on_ranks=on)
        return pg

    p.everywhere(orig_split, split_group)


# ---- DeviceMesh ----------------------------------------------------------------------------
def _mesh_info(mesh, how: str, rank: int, view) -> dict:
    try:  # the sub-mesh this rank is in (in local mode mesh.mesh would be rank 0's)
        full = mesh._layout.remap_to_tensor(mesh._rank_map)
        ranks = view(type(mesh)._get_mesh_tensor_from_full_mesh(full, current_rank=rank), rank)
    except (AttributeError, RuntimeError):
        ranks = view(mesh.mesh, rank)
    return {
        "how": how,
        "shape": list(mesh.shape),
        "dims": list(mesh.mesh_dim_names or ()),
        "ranks": [int(x) for x in ranks.flatten().tolist()],
    }


def _install_mesh(p: Patcher, rec: Recorder) -> None:
    from torch.distributed.device_mesh import DeviceMesh

    def emit(mesh, how: str) -> None:
        where = rec.where()
        for r in rec.ranks:  # fake mode: only this process's rank; local mode: all
            rec.event(r, "mesh", where=where, info=_mesh_info(mesh, how, r, rec.view))

    def wrap(name: str, how: str):
        orig = getattr(DeviceMesh, name)

        @functools.wraps(orig)
        def method(self, *args, **kwargs):
            depth = getattr(_tls, "mesh_depth", 0)
            _tls.mesh_depth = depth + 1
            try:
                out = orig(self, *args, **kwargs)
            finally:
                _tls.mesh_depth = depth
            if depth == 0 and isinstance(out, DeviceMesh):
                emit(out, how)
            elif depth == 0 and how == "init":
                emit(self, how)
            return out

        p.set(DeviceMesh, name, method)

    wrap("__init__", "init")
    wrap("__getitem__", "slice")
    wrap("_flatten", "flatten")
    if hasattr(DeviceMesh, "_unflatten"):
        wrap("_unflatten", "unflatten")


# ---- DTensor -------------------------------------------------------------------------------
def _install_dtensor(p: Patcher, rec: Recorder) -> None:
    from torch.distributed.tensor import _redistribute

    orig = _redistribute.redistribute_local_tensor

    @functools.wraps(orig)
    def redistribute_local_tensor(local_tensor, current_spec, target_spec, *args, **kwargs):
        if current_spec.placements == target_spec.placements:
            return orig(local_tensor, current_spec, target_spec, *args, **kwargs)
        mesh = current_spec.mesh
        info = {
            "mesh": list(mesh.mesh_dim_names or ()),
            "mesh_shape": list(mesh.shape),
            "src": [str(x) for x in current_spec.placements],
            "dst": [str(x) for x in target_spec.placements],
            "shape": list(current_spec.shape),
        }
        indices = {}
        where = rec.where()
        for r in rec.ranks:
            t = rec.view(local_tensor, r)
            indices[r] = rec.event(
                r,
                "redistribute",
                where=where,
                dtype=str(t.dtype).removeprefix("torch."),
                in_shapes=(tuple(t.shape),),
                info=info,
            )
        with rec.parent(indices):
            return orig(local_tensor, current_spec, target_spec, *args, **kwargs)

    p.everywhere(orig, redistribute_local_tensor)


# ---- p2p and batching ----------------------------------------------------------------------
def _install_p2p(p: Patcher, rec: Recorder) -> None:
    for name in ("send", "recv"):
        orig = getattr(c10d, name)
        p.everywhere(orig, rpg.blocking_p2p(orig))

    orig_batch = c10d.batch_isend_irecv

    @functools.wraps(orig_batch)
    def batch_isend_irecv(p2p_op_list):
        with rec.batch():
            return orig_batch(p2p_op_list)

    p.everywhere(orig_batch, batch_isend_irecv)

    orig_cm = c10d._coalescing_manager

    @contextlib.contextmanager
    def _coalescing_manager(*args, **kwargs):
        # the ops queued in the body are issued at the manager's exit, as one c10d *_coalesced
        # op (one tensor or many); an op issued in the body itself (no fast path) is its own
        with rec.batch():
            manager = orig_cm(*args, **kwargs)
            cm = manager.__enter__()
            try:
                yield cm
            except BaseException:
                if not manager.__exit__(*sys.exc_info()):
                    raise
            else:
                with rpg.coalesced():
                    manager.__exit__(None, None, None)

    p.everywhere(orig_cm, _coalescing_manager)

    from torch.distributed import _functional_collectives as funcol

    for name in ("all_gather_single_coalesced", "reduce_scatter_single_coalesced"):
        orig = getattr(funcol, name)

        def coalesced_funcol(*args, _orig=orig, **kwargs):
            with rpg.coalesced():
                return _orig(*args, **kwargs)

        p.everywhere(orig, functools.update_wrapper(coalesced_funcol, orig))


# ---- FSDP2 attribution ---------------------------------------------------------------------
def _install_fsdp(p: Patcher, rec: Recorder) -> None:
    """FSDP2 all-gathers (incl. prefetches) and reduce-scatters belong to the unit whose
    parameters they move, not to whichever module's hook happened to issue them."""
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    for name in ("unshard", "post_backward"):
        orig = getattr(FSDPParamGroup, name)

        def method(self, *args, _orig=orig, **kwargs):
            with rec.attribution.owning(self._module_fqn or ""):
                return _orig(self, *args, **kwargs)

        functools.update_wrapper(method, orig)
        p.set(FSDPParamGroup, name, method)
