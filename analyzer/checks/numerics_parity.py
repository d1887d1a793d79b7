"""numerics_divergence: the first value, in execution order (step, then forward, backward,
optimizer), whose global digest differs from a reference recording of the same model (its
1-rank twin, another layout, the previous commit) beyond the tolerance, with the collectives and
DTensor redistributions both recordings issued around it. Values present on one side only are
listed in notes, never matched by guess.

parameter_mismatch: a parameter on one side only, or of another global shape (a weight tie broken
by a parallelize plan, a layer a stage split dropped); the values both sides hold are compared
all the same. Bad input (`ReferenceMismatch`, exit 2): a reference with no parameter in common.
Values whose layout the recorder could not map onto the global one (real mode: an optimizer's
own tensors) are listed in a note, never compared."""

from __future__ import annotations

import polars as pl

from analyzer.checks.numerics_replicas import WHAT_TEXT
from analyzer.checks.numerics_tolerance import Tolerance, rel_error
from analyzer.checks.options import Checked
from analyzer.model.findings import Finding, Kind
from analyzer.model.text import ranks_text
from analyzer.model.trace import Trace
from traceformat.numerics import UNMAPPED_LAYOUT

NUMERICS_DIVERGENCE = Kind(
    name="numerics_divergence",
    about="the first value (module output, gradient, parameter) that differs from the reference recording",
    majority=False,
)

PARAMETER_MISMATCH = Kind(
    name="parameter_mismatch",
    about="a parameter only in the trace or only in the reference, or of another global shape",
    majority=False,
)

KEY = ["step", "what", "name", "occ"]
CONTEXT_EVENTS = 8
"""Collectives / redistributions listed per side around the diverging value."""


class ReferenceMismatch(ValueError):
    """The reference is not a recording of the same model (one line)."""


def same_model(trace: Trace, ref: Trace, ref_name: str = "the reference") -> None:
    """ReferenceMismatch when the two recordings have no parameter in common (another model)."""
    mine, theirs = dict(_params(trace)), dict(_params(ref))
    if mine and theirs and not set(mine) & set(theirs):
        raise ReferenceMismatch(
            f"{ref_name} is another model: no parameter in common (here {next(iter(mine))}, "
            f"in {ref_name} {next(iter(theirs))})"
        )


def parameter_findings(trace: Trace, ref: Trace) -> list[Finding]:
    """One finding per parameter on one side only or of another global shape, with what it
    suggests, from the modules that ran on each side: a parameter here whose module runs in the
    reference too, without it, is a tie broken (the reference holds it as another parameter);
    one only in the reference whose module never ran here, a layer missing."""
    mine, theirs = dict(_params(trace)), dict(_params(ref))
    ran_here, ran_there = _modules_run(trace), _modules_run(ref)
    # a side with unmapped parameters (a ZeRO partition) may hold the other's inside them
    if _has_unmapped(trace):
        theirs = {n: s for n, s in theirs.items() if n in mine}
    if _has_unmapped(ref):
        mine = {n: s for n, s in mine.items() if n in theirs}
    ranks = list(trace.ranks)
    out = []
    for name, shape in mine.items():
        module = name.rpartition(".")[0]
        if name not in theirs:
            if module in ran_there:
                hint = f"a weight tie broken? ({module} runs in the reference without a {name} of its own: shared)"
            else:
                hint = "a layer added?"
            out.append(_mismatch(name, f"parameter {name} {_shape(shape)} is only in the trace: {hint}", ranks))
        elif shape is not None and theirs[name] is not None and shape != theirs[name]:
            hint = "a shard recorded as the whole, or another split?"
            text = f"parameter {name} has shape {_shape(shape)} here, {_shape(theirs[name])} in the reference: {hint}"
            out.append(_mismatch(name, text, ranks))
    for name, shape in theirs.items():
        module = name.rpartition(".")[0]
        if name not in mine:
            if module in ran_here:
                hint = f"a weight tie made? ({module} runs here without a {name} of its own)"
            else:
                hint = f"a layer missing? ({module or name} never runs here: a stage split or plan that drops it)"
            out.append(_mismatch(name, f"parameter {name} {_shape(shape)} is only in the reference: {hint}", ranks))
    return out


def _has_unmapped(t: Trace) -> bool:
    assert t.numerics is not None
    return bool(t.numerics.filter(pl.col("layout").str.starts_with(UNMAPPED_LAYOUT)).height)


def _modules_run(t: Trace) -> set[str]:
    assert t.numerics is not None
    return set(t.numerics.filter(pl.col("what") == "output")["name"].unique().to_list())


def _mismatch(name: str, message: str, ranks: list[int]) -> Finding:
    return Finding(
        kind=PARAMETER_MISMATCH,
        message=message,
        ranks=ranks,
        culprit_ranks=ranks,
        module=name,
        step=0,
        phase="optimizer",
    )


def _shape(shape: list | None) -> str:
    return f"({', '.join(str(n) for n in shape)})" if shape is not None else "(shape unknown)"


def _params(t: Trace) -> list[tuple[str, list | None]]:
    assert t.numerics is not None
    first = t.numerics.filter((pl.col("what") == "param") & ~pl.col("layout").str.starts_with(UNMAPPED_LAYOUT))
    if first.is_empty():
        return []
    first = first.filter(pl.col("step") == first["step"].min()).sort("seq")
    return list(zip(first["name"].to_list(), first["shape"].to_list()))


def check(trace: Trace, ref: Trace, tol: Tolerance | None = None) -> Checked:
    tol = tol or Tolerance()
    out = Checked()
    assert trace.numerics is not None and ref.numerics is not None
    out.findings.extend(parameter_findings(trace, ref))
    here, there = _mapped(trace.numerics, "the trace", out.notes), _mapped(ref.numerics, "the reference", out.notes)
    a, rule_notes = combine_losses(here, there)
    out.notes.extend(rule_notes)
    b = there.select(*KEY, *[pl.col(c).alias(f"r_{c}") for c in ("sum", "sumsq", "amax", "numel", "phase")])
    joined = a.join(b, on=KEY, how="left", maintain_order="left")
    only_here = joined.filter(pl.col("r_sum").is_null())
    only_ref = b.join(a.select(KEY), on=KEY, how="anti")
    for side, frame in (("only in the trace", only_here), ("only in the reference", only_ref)):
        if frame.height:
            names = frame.unique(["what", "name"], maintain_order=True).head(5)
            listed = ", ".join(f"{w} {n or '(step)'}" for w, n in zip(names["what"], names["name"]))
            out.notes.append(f"{frame.height} value(s) {side}, not compared: {listed}")
    # a gradient stored in float32 but computed from bfloat16 activations (mixed precision) is as
    # exact as bfloat16: every value of a step takes the loosest tolerance of the step's forward
    step_rtol = (
        a.filter(pl.col("what") == "output").group_by("step").agg(step_rtol=tol.rtol_expr(pl.col("dtype")).max())
    )
    # the reference's class scale per step: every gradient, every output, ... of that step
    classes = b.group_by("step", "what").agg(
        class_rms=(pl.col("r_sumsq").clip(0).sum() / pl.col("r_numel").cast(pl.Float64).clip(1).sum()).sqrt()
    )
    both = (
        joined.filter(pl.col("r_sum").is_not_null())
        .join(step_rtol, on="step", how="left", maintain_order="left")
        .join(classes, on=["step", "what"], how="left", maintain_order="left")
        .with_columns(
            err=rel_error("", "r_", "r_numel", tol.atol, pl.col("class_rms").fill_null(0.0)),
            rtol=tol.rtol_expr(pl.col("dtype"))
            if tol.rtol is not None
            else pl.max_horizontal(tol.rtol_expr(pl.col("dtype")), pl.col("step_rtol")),
        )
    )
    bad = both.filter(pl.col("err") > pl.col("rtol")).sort("order")
    if bad.is_empty():
        return out
    row = bad.row(0, named=True)
    out.findings.append(_finding(row, trace, ref, both.filter(pl.col("order") < row["order"]).height))
    if bad.height > 1:
        out.notes.append(f"{bad.height - 1} later value(s) differ too (consequences of the first, not listed)")
    return out


def _mapped(frame: pl.DataFrame, side: str, notes: list[str]) -> pl.DataFrame:
    """The values whose global value is known; a note lists the others with the reason."""
    unmapped = pl.col("layout").str.starts_with(UNMAPPED_LAYOUT)
    left = frame.filter(unmapped)
    if left.height:
        names = left.unique("name", maintain_order=True)
        why = names["layout"][0].removeprefix(UNMAPPED_LAYOUT)
        listed = ", ".join(names["name"].head(5).to_list())
        notes.append(f"{left.height} value(s) in {side} not compared, their layout unknown ({why}): {listed}")
    return frame.filter(~unmapped)


def combine_losses(a: pl.DataFrame, ref: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """`a` with each step's loss and input gradients on the reference's terms. Where the ranks
    computed k > 1 distinct losses (different batches), the global loss is their mean (each a
    mean over its own batch, gradients averaged: DDP) or their sum (each normalised by the global
    token count: TorchTitan): whichever is nearer the reference's loss. The recorded input
    gradients are each rank's own loss's; under the mean they are k times the global ones. A
    reference of k_ref distinct losses itself (another layout, another mode) is on those terms
    too: the factors are relative to it, and none where both split the batch alike."""

    def distinct(frame: pl.DataFrame, name: str) -> pl.DataFrame:
        per = frame.filter(pl.col("what") == "loss").select(
            "step", pl.col("layout").str.extract(r"mean of (\d+)").cast(pl.Int64).fill_null(1).alias(name)
        )
        return per.group_by("step").agg(pl.col(name).max())

    k = (
        distinct(a, "k")
        .join(distinct(ref, "kr"), on="step", how="left")
        .with_columns(pl.col("kr").fill_null(1))
        .filter(pl.col("k") != pl.col("kr"))
    )
    if k.is_empty():
        return a, []
    ref_loss = ref.filter(pl.col("what") == "loss").group_by("step").agg(ref_loss=pl.col("sum").last())
    here_loss = a.filter(pl.col("what") == "loss").group_by("step").agg(loss=pl.col("sum").last())
    ratio = pl.col("k").cast(pl.Float64) / pl.col("kr").cast(pl.Float64)
    rule = (
        k.join(here_loss, on="step")
        .join(ref_loss, on="step", how="left")
        .with_columns(
            by_sum=(pl.col("loss") * ratio - pl.col("ref_loss")).abs() < (pl.col("loss") - pl.col("ref_loss")).abs(),
            ratio=ratio,
        )
        .select("step", "k", "ratio", "by_sum")
    )
    loss_factor = pl.when(pl.col("by_sum")).then(pl.col("ratio")).otherwise(1.0)
    grad_factor = pl.when(pl.col("by_sum")).then(1.0).otherwise(1.0 / pl.col("ratio"))
    factor = (
        pl.when(pl.col("k").is_null())
        .then(1.0)
        .when(pl.col("what") == "loss")
        .then(loss_factor)
        .when(pl.col("what") == "grad_input")
        .then(grad_factor)
        .otherwise(1.0)
    )
    out = (
        a.join(rule, on="step", how="left", maintain_order="left")
        .with_columns(_f=factor)
        .with_columns(
            sum=pl.col("sum") * pl.col("_f"),
            sumsq=pl.col("sumsq") * pl.col("_f") * pl.col("_f"),
            amax=pl.col("amax") * pl.col("_f"),
        )
        .drop("k", "ratio", "by_sum", "_f")
    )
    sums = rule.filter(pl.col("by_sum"))["step"].to_list()
    means = rule.filter(~pl.col("by_sum"))["step"].to_list()
    notes = []
    for steps, how in ((sums, "sum"), (means, "mean")):
        if steps:
            notes.append(
                f"the ranks' distinct losses combine as their {how} at step(s) {ranks_text(steps)}, as in the reference"
            )
    return out, notes


def _finding(row: dict, trace: Trace, ref: Trace, agreed: int) -> Finding:
    what = WHAT_TEXT.get(row["what"], row["what"])
    name = row["name"]
    module = _module_of(row)
    grads = row["what"] in ("grad", "grad_norm")
    here = around(trace, module, row["step"], row["phase"], grads)
    there = around(ref, module, row["step"], row["phase"], grads)
    message = (
        f"{what} {name or row['what']} differs from the reference at step {row['step']} {row['phase']}: "
        f"relative error {row['err']:.3g} > tolerance {row['rtol']:.3g} ({row['dtype']}); "
        f"{agreed} value(s) before it agree. Around {module or 'the step'}: here {_text(here)}; "
        f"reference {_text(there)}"
    )
    ranks = list(trace.ranks)
    return Finding(
        kind=NUMERICS_DIVERGENCE,
        message=message,
        ranks=ranks,
        culprit_ranks=ranks,
        module=name or row["what"],
        step=int(row["step"]),
        phase=row["phase"],
        numerics={
            "what": row["what"],
            "dtype": row["dtype"],
            "layout": row["layout"],
            "rel_error": float(row["err"]),
            "tolerance": float(row["rtol"]),
            "value": {"sum": row["sum"], "sumsq": row["sumsq"], "amax": row["amax"]},
            "reference": {"sum": row["r_sum"], "sumsq": row["r_sumsq"], "amax": row["r_amax"]},
            "agreed_before": agreed,
            "comms": here,
            "reference_comms": there,
        },
    )


def _module_of(row: dict) -> str:
    """The module a value belongs to: itself, or a parameter's owner."""
    if row["what"] in ("grad", "param"):
        return row["name"].rsplit(".", 1)[0] if "." in row["name"] else ""
    return row["name"]


def around(trace: Trace, module: str, step: int, phase: str, grads: bool = False) -> list[str]:
    """The collectives and redistributions the lowest rank issued in `module` (and below) at
    that step and phase, as 'op on group (module)' lines, repeats counted. `grads` (a
    parameter's gradient): also what ran outside any module between backward and the
    optimizer (the program's own gradient handling), with its frame."""
    if not trace.ranks:
        return []
    ev = trace.select("idx", "op", "group", "module", "phase", "step", "info", "frame", ranks=[trace.ranks[0]])
    ph, m = pl.col("phase").cast(pl.String), pl.col("module").cast(pl.String)
    ev = ev.filter(pl.col("step") == step)
    backward_end = ev.filter(ph.is_in(["forward", "backward"]))["idx"].max()
    ev = ev.filter(
        ~pl.col("op").cast(pl.String).is_in(["wait", "mesh", "new_group", "split_group", "init_process_group"])
    )
    mine = (ph == phase) & ((m == module) | m.str.starts_with(module + ".")) if module else ph == phase
    if grads:  # after the step's backward (where it recorded any), before its optimizer
        after = pl.col("idx") > backward_end if backward_end is not None else pl.lit(True)
        mine = mine | ((ph == "other") & (m == "") & after)
    ev = ev.filter(mine)
    if ev.is_empty():
        return []
    labels = dict(zip(trace.groups["gid"].to_list(), trace.groups["label"].to_list()))
    lines: list[str] = []
    counts: dict[str, int] = {}
    for op, gid, mod, info, frame in ev.select("op", "group", "module", "info", "frame").iter_rows():
        text = str(op)
        if op == "redistribute" and info is not None and info >= 0:
            i = trace.atom(info) or {}
            text += f" {_placements(i.get('src'))} -> {_placements(i.get('dst'))}"
        elif gid is not None and gid >= 0:
            text += f" on {labels.get(gid) or gid}"
        text += f" ({mod})" if mod else f" ({frame})" if frame else ""
        if text not in counts:
            lines.append(text)
        counts[text] = counts.get(text, 0) + 1
    return [f"{t} x{counts[t]}" if counts[t] > 1 else t for t in lines][:CONTEXT_EVENTS]


def _placements(p) -> str:
    return ",".join(str(x) for x in p) if isinstance(p, list) else str(p)


def _text(lines: list[str]) -> str:
    return "; ".join(lines) if lines else "no collective"
