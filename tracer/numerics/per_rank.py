"""Numerics in real mode (`tracer record --mode real --numerics`): every rank process digests its
own values at the same points as local mode (hooks.py) and writes them, with what the global
value needs, as its own rank records (traceformat/numerics.py: RANK_RECORD); `tracer record`
combines every rank's records into the numerics records local mode writes (combine.py), so
`analyzer numerics` reads real, local and mixed pairs alike.

What a row carries besides this rank's digest: a DTensor's mesh (its global ranks) and
placements, and for a Partial one its local elements (a pending reduction is elementwise: its
digest is not the sum of the shards' digests); a plain tensor, only whether it is an activation
(part_of) or a parameter's value. At the first forward every plain parameter's digest is written
once more ("init"): ranks that start equal hold replicas, ranks that start different hold their
own (hand-written expert or tensor parallel). A tensor the optimizer steps that is no parameter
of the model (a ZeRO partition, a flat buffer) is unmapped (its layout says so and why):
listed, never compared.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Partial

from traceformat import numerics as fmt_numerics
from traceformat.numerics import UNMAPPED_LAYOUT
from tracer.capture.patches import Patcher
from tracer.capture.recorder import Recorder, tensor_dtype
from tracer.numerics.digests import Digest, digests_of
from tracer.numerics.hooks import Numerics

NOT_A_PARAMETER = "an optimizer's own tensor, no parameter of the model (a ZeRO partition, a flat buffer)"
FLAT_PARAMETER = "an FSDP1 FlatParameter: its original parameters flattened together (use_orig_params=True maps them)"


def _unmapped(name: str, param) -> str | None:
    """Why a parameter's (or its gradient's) value cannot be mapped onto the reference's, or None."""
    if name.startswith("param_groups."):  # not among the model's named parameters
        return NOT_A_PARAMETER
    if getattr(param, "_is_flat_param", False):
        return FLAT_PARAMETER
    return None


class RankNumerics(Numerics):
    """This rank process's digests, written to its own part as rank records."""

    def __init__(self, rec: Recorder, rank: int):
        super().__init__(rec, 1)
        self.rank = rank
        self.cols = {name: [] for name in fmt_numerics.RANK_FIELD_NAMES}
        self.chunk = -1  # inside a pipeline stage's forward / backward of one microbatch: its id
        self.stage: tuple[torch.nn.Module, int, int] | None = None  # and the stage: module, index, of how many

    def install(self, p: Patcher) -> None:
        super().install(p)
        self._pipeline_stages(p)

    def _pipeline_stages(self, p: Patcher) -> None:
        """A pipeline stage runs each microbatch through forward_one_chunk / backward_one_chunk:
        its values are tagged with the microbatch (combine.py joins them into the batch's), and
        the metadata inference forward it runs once on placeholder inputs is not digested."""
        try:
            from torch.distributed.pipelining import stage as pp_stage
        except ImportError:
            return
        me = self

        def in_chunk(orig):
            def run(stage, chunk_id, *args, **kwargs):
                outer, me.chunk = (me.chunk, me.stage), int(chunk_id)
                me.stage = (stage.submod, int(stage.stage_index), int(stage.num_stages))
                try:
                    return orig(stage, chunk_id, *args, **kwargs)
                finally:
                    me.chunk, me.stage = outer

            return run

        def unseen(orig):
            def run(*args, **kwargs):
                outer, me.busy = me.busy, True
                try:
                    return orig(*args, **kwargs)
                finally:
                    me.busy = outer

            return run

        base = pp_stage._PipelineStageBase
        for name in ("forward_one_chunk", "backward_one_chunk"):
            if hasattr(base, name):
                p.set(base, name, in_chunk(getattr(base, name)))
        for name in ("_forward_metadata_inference", "_backward_metadata_inference"):
            if hasattr(pp_stage.PipelineStage, name):
                p.set(pp_stage.PipelineStage, name, unseen(getattr(pp_stage.PipelineStage, name)))

    def _first_seen(self, root: torch.nn.Module) -> None:
        self.busy = True
        try:
            with torch.no_grad():
                for name, param in root.named_parameters():
                    if not isinstance(param, DTensor) and param.is_floating_point() and _tp_shard(param) is None:
                        self._local_row("forward", "init", name, param, part_of=False)
        finally:
            self.busy = False

    def _loss(self, loss) -> None:
        if self.busy:
            return
        self.busy = True
        try:
            with torch.no_grad():
                local = loss.to_local() if isinstance(loss, DTensor) else loss
                self._local_row("forward", "loss", "", local, part_of=True, dtype=tensor_dtype(loss))
        finally:
            self.busy = False

    def _add(self, phase: str, what: str, name: str, t, part_of: bool = False, of=None) -> Digest:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return (0.0, 0.0, 0.0)
        self.busy = True
        try:
            with torch.no_grad():
                why = _unmapped(name, of) if what in ("grad", "param") else None
                if why is not None:
                    return self._local_row(phase, what, name, t, part_of, layout=f"{UNMAPPED_LAYOUT}{why}")
                name = self._stage_boundary(what, name)
                if isinstance(t, DTensor):
                    return self._dtensor_row(phase, what, name, t, part_of)
                shard = _tp_shard(of) if what in ("grad", "param") else None
                if shard is not None:
                    return self._tp_row(phase, what, name, t, *shard)
                return self._local_row(phase, what, name, t, part_of)
        finally:
            self.busy = False

    def _stage_boundary(self, what: str, name: str) -> str:
        """A pipeline stage's root module is the whole model's only in its output on the last
        stage (and its input gradient on the first): elsewhere it is a stage boundary, named
        `ROOT@stageI`, compared with nothing of the single-process run's."""
        if self.stage is None or what not in ("output", "grad_input"):
            return name
        root, i, n = self.stage
        if name != self._name(root) or (what == "output" and i == n - 1) or (what == "grad_input" and i == 0):
            return name
        return f"{name}@stage{i}"

    def _local_row(self, phase, what, name, t, part_of, dtype=None, layout="plain") -> Digest:
        (d,) = digests_of([t])
        self._rank_row(phase, what, name, dtype or tensor_dtype(t), list(t.shape), t.numel(), d, layout, part_of)
        return d

    def _dtensor_row(self, phase, what, name, t: DTensor, part_of: bool) -> Digest:
        local = t._local_tensor
        (d,) = digests_of([local])
        placements = [_placement(p) for p in t.placements]
        raw = None
        if any(isinstance(p, Partial) for p in t.placements):
            raw = local.detach().double().contiguous().reshape(-1).numpy().astype("<f8").tobytes()
        mesh = t.device_mesh.mesh.tolist()
        self._rank_row(
            phase, what, name, tensor_dtype(t), list(t.shape), t.numel(), d, "", part_of, mesh, placements, raw
        )
        return d

    def _tp_row(self, phase, what, name, t, ranks: list[int], dim: int) -> Digest:
        """A Megatron-core tensor-parallel parameter (or its gradient): a shard along `dim` over
        its tensor-parallel group, as a DTensor Shard(dim) on a 1-D mesh of those ranks."""
        (d,) = digests_of([t])
        shape = list(t.shape)
        shape[dim] *= len(ranks)
        numel = t.numel() * len(ranks)
        self._rank_row(phase, what, name, tensor_dtype(t), shape, numel, d, "", False, list(ranks), [f"S({dim})"])
        return d

    def _rank_row(self, phase, what, name, dtype, shape, numel, d, layout, part_of, mesh=None, pl=None, raw=None):
        c = self.cols
        for key, value in (
            ("phase", phase),
            ("what", what),
            ("name", name),
            ("dtype", dtype),
            ("shape", shape),
            ("numel", int(numel)),
            ("sum", float(d[0])),
            ("sumsq", float(d[1])),
            ("amax", float(d[2])),
            ("layout", layout),
            ("part_of", bool(part_of)),
            ("mesh", mesh),
            ("placements", pl),
            ("raw", raw),
            ("chunk", self.chunk),
        ):
            c[key].append(value)

    def _row(self, phase, what, name, dtype, shape, numel, d: Digest, layout, ranks) -> None:
        """The base class's step-wide rows (the gradient norm): combine.py recomputes them from
        the combined gradients, so a rank's own partial norm is not written."""

    def _flush(self, step: int) -> None:
        if self.cols["phase"]:
            self.writer.numerics([fmt_numerics.rank_record(max(step, 0), self.rank, self.cols)])
            self.cols = {name: [] for name in fmt_numerics.RANK_FIELD_NAMES}


def _tp_shard(param) -> tuple[list[int], int] | None:
    """(the tensor-parallel group's ranks, the partition dim) of a Megatron-core parameter that
    its tensor_model_parallel / partition_dim attributes declare a shard; None otherwise."""
    if param is None or not getattr(param, "tensor_model_parallel", False):
        return None
    ps = sys.modules.get("megatron.core.parallel_state")  # only where the program imported it
    group = ps.get_tensor_model_parallel_group() if ps is not None else None
    if group is None:
        return None
    ranks = dist.get_process_group_ranks(group)
    return (ranks, int(getattr(param, "partition_dim", 0))) if len(ranks) > 1 else None


def _placement(p) -> str:
    """'S(d)', 'R' or 'P(op)' (the spelling DTensor prints), whatever the torch version's repr."""
    if p.is_shard():
        return f"S({p.dim})"
    if p.is_replicate():
        return "R"
    return f"P({getattr(p, 'reduce_op', 'sum')})"
