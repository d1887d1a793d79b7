"""Numerics under local mode (`tracer record --mode local --numerics`): per step, a digest (sum,
sum of squares, max |x|, in float64) of the GLOBAL value of every module's forward output, the
gradient of its input, the loss, every parameter's gradient (as the optimizer sees it), the
global gradient norm and every parameter after the optimizer step; and each rank's own digest
where the value is declared replicated. Written as one traceformat.numerics record per step.

LocalTensorMode holds every rank's shard, so the global value is computed here, in this process,
without a collective: a DTensor's placements say how (Shard: the shards' digests add up,
Replicate: one copy, Partial: the shards are reduced elementwise first). A plain tensor says
nothing about its layout; the rule (docs/numerics.md): identical on every rank -> one copy; a
parameter or its gradient -> replicated (DP / TP keep it identical), the lowest rank's value is
the global one and every rank's digest goes into the record, unless its ranks already held
different values before the first forward (each rank's own, e.g. hand-written experts: parts of
the global one, like an activation); an activation that differs between
ranks -> each distinct value is a part of the global one (a data- or sequence-sharded batch, a
tensor-parallel shard returned as local), their digests add up.

Gradients of activations are those of each rank's own loss, recorded as they are. When the
ranks' losses differ (data parallel over different batches), the global loss is their mean (each
rank's loss a mean over its batch: DDP) or their sum (each normalised by the global token count:
TorchTitan); the loss row holds the mean of the k distinct losses (layout "mean of k") and the
analyzer decides which against the reference (analyzer/checks/numerics_parity.py).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Partial, Replicate
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from traceformat import numerics as fmt_numerics
from tracer.capture.patches import Patcher
from tracer.capture.recorder import Recorder, tensor_dtype
from tracer.numerics.digest_math import Digest, add_up, rank_at, ranks_dict
from tracer.numerics.digests import digests_of, mesh_grid, rank_values, reduce_partial, sibling_grids


class Numerics:
    """Collects one step's digests at a time and writes them to the lowest recorded rank's part."""

    def __init__(self, rec: Recorder, world_size: int):
        self.rec = rec
        self.attr = rec.attribution
        self.world = world_size
        self.writer = rec.streams[min(rec.ranks)].writer
        self.cols: dict[str, list] = {name: [] for name in fmt_numerics.FIELD_NAMES}
        self.hooked: set[int] = set()
        self.roots: dict[int, torch.nn.Module] = {}
        self.own: set[int] = set()  # plain parameters each rank holds its own of (see _first_seen)
        self.handles: list = []
        self.busy = False
        self.in_tensor_backward = False

    # ---- hooks --------------------------------------------------------------------------
    def install(self, p: Patcher) -> None:
        """After Attribution.install: its hooks (module stack, step count) run before these."""
        self.handles = [
            register_module_forward_pre_hook(self._pre),
            register_optimizer_step_pre_hook(self._opt_pre),
            register_optimizer_step_post_hook(self._opt_post),
        ]
        orig = torch.Tensor.backward
        orig_autograd = torch.autograd.backward
        me = self

        def backward(self, *args, **kwargs):
            if self.numel() == 1 and self.is_floating_point():
                me._loss(self)
            return orig(self, *args, **kwargs)

        def autograd_backward(tensors, grad_tensors=None, *args, **kwargs):
            # a pipeline schedule's last stage: torch.autograd.backward([loss], grad_tensors=[None])
            one = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
            grads = [grad_tensors] if grad_tensors is None or isinstance(grad_tensors, torch.Tensor) else grad_tensors
            if not me.in_tensor_backward and len(one) == 1 and list(grads) == [None]:
                if one[0].numel() == 1 and one[0].is_floating_point():
                    me._loss(one[0])
            return orig_autograd(tensors, grad_tensors, *args, **kwargs)

        def tensor_backward(self, *args, **kwargs):
            me.in_tensor_backward = True  # Tensor.backward calls torch.autograd.backward: one loss
            try:
                return backward(self, *args, **kwargs)
            finally:
                me.in_tensor_backward = False

        p.set(torch.Tensor, "backward", tensor_backward)
        p.set(torch.autograd, "backward", autograd_backward)

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        self._flush(self.attr.step)

    def _pre(self, mod, args):
        if self.busy or _in_backward():  # activation checkpointing's recompute: already recorded
            return None
        if len(self.attr._stack) == 1 and id(mod) not in self.roots:
            self.roots[id(mod)] = mod
            self._first_seen(mod)
        if id(mod) not in self.hooked:
            # a module hook appended now runs after the hooks parallelize_module / fully_shard
            # registered: it sees the output the caller gets (a TP output_fn's local tensor)
            self.hooked.add(id(mod))
            mod.register_forward_hook(self._out)
        if not torch.is_grad_enabled():
            return None
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.requires_grad and a.is_floating_point():
                # a view only this module consumes: its gradient is the module's input gradient
                tap = a.view_as(a)
                tap.register_hook(functools.partial(self._grad_in, self._name(mod)))
                return (*args[:i], tap, *args[i + 1 :])
            if isinstance(a, torch.Tensor):
                break
        return None

    def _first_seen(self, root: torch.nn.Module) -> None:
        """A plain parameter whose ranks already hold different values before the first
        forward (hand-written expert parallel: each rank its own experts, seeded by rank) is the
        rank's own, not a replica: its distinct values are parts of the global one, and no
        replica check applies. A replicated one starts equal (DDP broadcasts it, a shared seed)."""
        self.busy = True
        try:
            with torch.no_grad():
                for param in root.parameters():
                    if isinstance(param, DTensor) or not param.is_floating_point():
                        continue
                    shards = list(rank_values(param, self.world).values())
                    if any(not torch.equal(shards[0], s) for s in shards[1:]):
                        self.own.add(id(param))
        finally:
            self.busy = False

    def _out(self, mod, args, out) -> None:
        if self.busy or _in_backward():
            return
        t = _first_tensor(out)
        if t is not None:
            self._add("forward", "output", self._name(mod), t, part_of=True)

    def _grad_in(self, name: str, grad) -> None:
        if grad is not None and not self.busy:
            self._add("backward", "grad_input", name, grad, part_of=True)

    def _loss(self, loss) -> None:
        if self.busy:
            return
        self.busy = True
        try:
            with torch.no_grad():  # on the ranks' plain shards: LocalTensorMode runs them as they are
                local = loss.to_local() if isinstance(loss, DTensor) else loss
                values = [float(v.double().reshape(())) for v in rank_values(local, self.world).values()]
        finally:
            self.busy = False
        distinct = sorted(set(values))  # tp / cp replicas of one loss count once
        mean = sum(distinct) / len(distinct)
        d = (mean, mean * mean, abs(mean))
        self._row("forward", "loss", "", tensor_dtype(loss), [], 1, d, f"mean of {len(distinct)}", None)

    def _opt_pre(self, opt, args, kwargs) -> None:
        if self.attr.in_optimizer != 1:
            return
        names = self._param_names()
        total = 0.0
        dtype = "float32"
        for gi, group in enumerate(opt.param_groups):
            for pi, param in enumerate(group["params"]):
                if param.grad is None:
                    continue
                dtype = tensor_dtype(param.grad)
                name = names.get(id(param), f"param_groups.{gi}.{pi}")
                d = self._add("backward", "grad", name, param.grad, part_of=id(param) in self.own, of=param)
                total += d[1]
        norm = math.sqrt(total)
        self._row("backward", "grad_norm", "", dtype, [], 1, (norm, total, norm), "norm", None)

    def _opt_post(self, opt, args, kwargs) -> None:
        if self.attr.in_optimizer != 0:
            return
        names = self._param_names()
        for gi, group in enumerate(opt.param_groups):
            for pi, param in enumerate(group["params"]):
                name = names.get(id(param), f"param_groups.{gi}.{pi}")
                self._add("optimizer", "param", name, param.detach(), part_of=id(param) in self.own, of=param)
        self._flush(self.attr.step - 1)  # Attribution's post hook counted the step already

    # ---- digests ------------------------------------------------------------------------
    def _name(self, mod) -> str:
        # keyed by the live module since #27 (attribution._ModuleMap), not by id(): by id every
        # module fell back to its class name and the blocks of a model shared one name
        return self.attr._names.get(mod) or type(mod).__name__

    def _param_names(self) -> dict[int, str]:
        names: dict[int, str] = {}
        for root in self.roots.values():
            for name, param in root.named_parameters():
                names.setdefault(id(param), name)
        return names

    def _add(self, phase: str, what: str, name: str, t, part_of: bool = False, of=None) -> Digest:
        """Digest `t` (global and, where declared replicated, per rank) into the step's rows.
        part_of: an activation (distinct plain values are parts of the global one); otherwise a
        parameter or gradient (a plain one is replicated). of: the parameter a gradient or
        parameter row is of."""
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return (0.0, 0.0, 0.0)
        self.busy = True
        try:
            with torch.no_grad():  # on the ranks' plain shards: LocalTensorMode runs them as they are
                d, shape, numel, layout, ranks = self._digest(t, part_of)
        finally:
            self.busy = False
        self._row(phase, what, name, tensor_dtype(t), shape, numel, d, layout, ranks)
        return d

    def _digest(self, t, part_of: bool) -> tuple[Digest, list | None, int, str, dict | None]:
        if isinstance(t, DTensor):
            return self._dtensor(t, part_of)
        locals_ = rank_values(t, self.world)
        ranks = sorted(locals_)
        per = digests_of([locals_[r] for r in ranks])
        classes: dict[Digest, list[int]] = {}
        for r, d in zip(ranks, per):
            classes.setdefault(d, []).append(r)
        replicated = None if part_of or self.world < 2 else ranks_dict([ranks], ranks, per)
        if len(classes) == 1:
            return per[0], list(t.shape), t.numel(), "plain", replicated
        if not part_of:
            return per[0], list(t.shape), t.numel(), "plain", replicated
        firsts = [members[0] for members in classes.values()]
        d = add_up([per[ranks.index(r)] for r in firsts])
        numel = sum(locals_[r].numel() for r in firsts)
        return d, None, numel, f"plain x{len(classes)}", None

    def _dtensor(self, t: DTensor, part_of: bool) -> tuple[Digest, list | None, int, str, dict | None]:
        """A DTensor's global value on its mesh by its placements. A mesh of part of the world
        (a tp submesh of dp x tp) has siblings that the placements do not describe: across them
        the value is treated as a plain one (identical: one copy; an activation's distinct
        values: parts; a parameter's: replicas that must agree)."""
        mesh = t.device_mesh
        shape = tuple(mesh.mesh.shape)
        placements = t.placements
        locals_ = rank_values(t._local_tensor, self.world)
        partial = [i for i, p in enumerate(placements) if isinstance(p, Partial)]
        replicate = [i for i, p in enumerate(placements) if isinstance(p, Replicate)]
        layout = ",".join(str(p) for p in placements)
        grids = sibling_grids(mesh, mesh_grid(mesh.mesh), self.world)
        per_grid: list[Digest] = []
        for grid in grids:
            fixed = [range(1) if i in partial or i in replicate else range(n) for i, n in enumerate(shape)]
            pieces: list[torch.Tensor] = []
            for c in itertools.product(*fixed):
                if not partial:
                    pieces.append(locals_[rank_at(grid, c)])
                    continue
                members = []
                for pc in itertools.product(*[range(shape[i]) for i in partial]):
                    cc = list(c)
                    for i, v in zip(partial, pc):
                        cc[i] = v
                    members.append(locals_[rank_at(grid, tuple(cc))])
                pieces.append(reduce_partial(members, [placements[i] for i in partial]))
            per_grid.append(add_up(digests_of(pieces)))
        distinct = list(dict.fromkeys(per_grid))
        numel = t.numel()
        out_shape: list | None = list(t.shape)
        if len(distinct) == 1 or not part_of:
            d = per_grid[0]
        else:
            d, numel, out_shape = add_up(distinct), numel * len(distinct), None
            layout += f" x{len(distinct)}"
        # ranks that must hold the same local value: those at the same mesh position but for
        # the Replicate dims, in every sibling mesh too where the value is a parameter's
        keys: dict[tuple, list[int]] = {}
        for k, grid in enumerate(grids):
            for c in itertools.product(*[range(n) for n in shape]):
                key = tuple(0 if i in replicate else v for i, v in enumerate(c))
                keys.setdefault(key if not part_of else (k, *key), []).append(rank_at(grid, c))
        groups = [sorted(g) for g in keys.values() if len(g) > 1]
        per_rank = None
        if groups:
            ranks = sorted(r for g in groups for r in g)
            per_rank = ranks_dict(groups, ranks, digests_of([locals_[r] for r in ranks]))
        return d, out_shape, numel, layout, per_rank

    def _row(self, phase, what, name, dtype, shape, numel, d: Digest, layout, ranks) -> None:
        c = self.cols
        c["phase"].append(phase)
        c["what"].append(what)
        c["name"].append(name)
        c["dtype"].append(dtype)
        c["shape"].append(shape)
        c["numel"].append(int(numel))
        c["sum"].append(float(d[0]))
        c["sumsq"].append(float(d[1]))
        c["amax"].append(float(d[2]))
        c["layout"].append(layout)
        c["ranks"].append(ranks)

    def _flush(self, step: int) -> None:
        if self.cols["phase"]:
            self.writer.numerics([fmt_numerics.record(max(step, 0), self.cols)])
            self.cols = {name: [] for name in fmt_numerics.FIELD_NAMES}


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


def _first_tensor(out) -> Any:
    """The output a module's digest is of: the tensor itself, or in a tuple, list or dict (a
    model's output, e.g. transformers' `CausalLMOutputWithPast`: loss, logits, cache) the first
    tensor with a dimension, else the first scalar. A model's scalar beside its activations is a
    loss each rank reduced over its own share, which the program combines as it chooses (mean,
    sum, scaled): the activation is the model's output, the loss is compared as the loss."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        tensors = [x for x in out if isinstance(x, torch.Tensor)]
        return next((x for x in tensors if x.dim() > 0), tensors[0] if tensors else None)
    return None
