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

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Partial

from traceformat import numerics as fmt_numerics
from traceformat.numerics import UNMAPPED_LAYOUT
from tracer.capture.recorder import Recorder, tensor_dtype
from tracer.numerics.digests import Digest, digests_of
from tracer.numerics.hooks import Numerics

UNMAPPED = "an optimizer's own tensor, no parameter of the model (a ZeRO partition, a flat buffer)"


class RankNumerics(Numerics):
    """This rank process's digests, written to its own part as rank records."""

    def __init__(self, rec: Recorder, rank: int):
        super().__init__(rec, 1)
        self.rank = rank
        self.cols = {name: [] for name in fmt_numerics.RANK_FIELD_NAMES}

    def _first_seen(self, root: torch.nn.Module) -> None:
        self.busy = True
        try:
            with torch.no_grad():
                for name, param in root.named_parameters():
                    if not isinstance(param, DTensor) and param.is_floating_point():
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

    def _add(self, phase: str, what: str, name: str, t, part_of: bool = False) -> Digest:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return (0.0, 0.0, 0.0)
        self.busy = True
        try:
            with torch.no_grad():
                if what in ("grad", "param") and name.startswith("param_groups."):
                    return self._local_row(phase, what, name, t, part_of, layout=f"{UNMAPPED_LAYOUT}{UNMAPPED}")
                if isinstance(t, DTensor):
                    return self._dtensor_row(phase, what, name, t, part_of)
                return self._local_row(phase, what, name, t, part_of)
        finally:
            self.busy = False

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
        ):
            c[key].append(value)

    def _row(self, phase, what, name, dtype, shape, numel, d: Digest, layout, ranks) -> None:
        """The base class's step-wide rows (the gradient norm): combine.py recomputes them from
        the combined gradients, so a rank's own partial norm is not written."""

    def _flush(self, step: int) -> None:
        if self.cols["phase"]:
            self.writer.numerics([fmt_numerics.rank_record(max(step, 0), self.rank, self.cols)])
            self.cols = {name: [] for name in fmt_numerics.RANK_FIELD_NAMES}


def _placement(p) -> str:
    """'S(d)', 'R' or 'P(op)' (the spelling DTensor prints), whatever the torch version's repr."""
    if p.is_shard():
        return f"S({p.dim})"
    if p.is_replicate():
        return "R"
    return f"P({getattr(p, 'reduce_op', 'sum')})"
