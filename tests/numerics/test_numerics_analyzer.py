"""analyzer numerics on hand-written traces: the numerics record's round trip, replica_divergence,
numerics_divergence (first in execution order, tolerance by dtype, --rtol), bad input (exit 2,
one line). Digests here are derived by hand: sum, sum of squares, max |x| of small vectors."""

from __future__ import annotations

import json

import pytest
from conftest import one_line_error, run_tracer

from traceformat import format as fmt
from traceformat import numerics as fmt_numerics
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader
from traceformat.writer import TraceWriter


def digest(xs: list[float]) -> tuple[float, float, float]:
    return (sum(xs), sum(x * x for x in xs), max(abs(x) for x in xs))


def row(phase, what, name, xs, dtype="float32", ranks=None, shape=None):
    s, ss, am = digest(xs)
    return dict(
        phase=phase,
        what=what,
        name=name,
        dtype=dtype,
        shape=shape if shape is not None else [len(xs)],
        numel=len(xs),
        sum=s,
        sumsq=ss,
        amax=am,
        layout="plain",
        ranks=ranks,
    )


def per_rank(values: dict[int, list[float]], groups: list[list[int]]) -> dict:
    ds = {r: digest(xs) for r, xs in values.items()}
    ranks = sorted(ds)
    return {
        "groups": groups,
        "rank": ranks,
        "sum": [ds[r][0] for r in ranks],
        "sumsq": [ds[r][1] for r in ranks],
        "amax": [ds[r][2] for r in ranks],
    }


def write(path, steps: dict[int, list[dict]], world: int = 4, mode: str = "local") -> str:
    """A trace of `world` ranks (one all_reduce each per step) with these numerics rows."""
    header = fmt.make_header(world_size=world, ranks=list(range(world)), mode=mode)
    w = TraceWriter(str(path), header)
    try:
        w.group(0, "0", list(range(world)), "default_pg")
        for r in range(world):
            for step in steps or {0: []}:
                w.row(
                    r, fmt.default_row(op=w.atom("all_reduce"), group=0, seq=step, step=step, phase=w.atom("backward"))
                )
            w.end(r, len(steps or {0: []}))
        for step, rows in steps.items():
            cols = {name: [x[name] for x in rows] for name in fmt_numerics.FIELD_NAMES}
            w.numerics([fmt_numerics.record(step, cols)])
        w.footer()
    finally:
        w.close()
    return str(path)


def model_rows(w=(1.0, 2.0), out=(0.5, -1.0, 2.0), grad=(0.1, 0.2), param=(0.9, 1.8), ranks=None):
    return [
        row("forward", "output", "lin", list(out)),
        row("forward", "loss", "", [1.25], shape=[]),
        row("backward", "grad_input", "lin", [0.3, 0.1, -0.2]),
        row("backward", "grad", "lin.weight", list(grad), ranks=ranks),
        row("optimizer", "param", "lin.weight", list(param), ranks=ranks),
    ]


def numerics(*args) -> tuple[int, dict]:
    proc = run_tracer("analyzer", "numerics", *args, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_record_round_trip_and_merge(tmp_path):
    path = write(tmp_path / "a.trace", {0: model_rows(), 1: model_rows()})
    data = trace_reader.read_trace(path)
    assert data.header["version"] == list(fmt.VERSION) and len(data.numerics) == 2
    assert fmt_numerics.decode(data.numerics[1])["c"]["name"] == ["lin", "", "lin", "lin.weight", "lin.weight"]
    trace_parts.write_data(tmp_path / "b.trace", data)
    again = trace_reader.read_trace(tmp_path / "b.trace")
    assert again.numerics == data.numerics
    merged = trace_parts.merge([path], tmp_path / "m.trace")
    assert merged.complete and trace_reader.read_trace(tmp_path / "m.trace").numerics == data.numerics


def test_trace_without_numerics_loads_as_before(tmp_path):
    from analyzer import load

    t = load(write(tmp_path / "a.trace", {}))
    assert t.numerics is None and t.replicas is None and t.n_events == 4


def test_malformed_record_is_refused(tmp_path):
    path = write(tmp_path / "a.trace", {0: model_rows()})
    data = trace_reader.read_trace(path)
    data.numerics[0]["c"]["sum"] = data.numerics[0]["c"]["sum"][:-1]
    trace_parts.write_data(tmp_path / "bad.trace", data)
    with pytest.raises(fmt.TraceFormatError, match="numerics column sum of wrong length"):
        trace_reader.read_trace(tmp_path / "bad.trace")


def test_equal_traces_have_no_finding(tmp_path):
    a = write(tmp_path / "a.trace", {0: model_rows(), 1: model_rows()})
    ref = write(tmp_path / "ref.trace", {0: model_rows(), 1: model_rows()}, world=1)
    rc, out = numerics(a, "--ref", ref)
    assert (rc, out["findings"]) == (0, [])


def test_first_divergence_in_execution_order(tmp_path):
    """Step 1's gradient differs, and so does step 1's parameter after it: the gradient is
    reported (backward comes before optimizer), with its error against the float32 tolerance."""
    a = write(tmp_path / "a.trace", {0: model_rows(), 1: model_rows(grad=(0.1, 0.3), param=(0.9, 1.7))})
    ref = write(tmp_path / "ref.trace", {0: model_rows(), 1: model_rows()}, world=1)
    rc, out = numerics(a, "--ref", ref)
    assert rc == 1 and len(out["findings"]) == 1
    f = out["findings"][0]
    assert (f["kind"], f["module"], f["step"], f["phase"]) == ("numerics_divergence", "lin.weight", 1, "backward")
    # sum 0.4 vs 0.3 over sqrt(2 * 0.05): 0.316; norm sqrt(0.1) vs sqrt(0.05): 0.414; amax 0.3 vs 0.2: 0.5
    assert f["numerics"]["rel_error"] == pytest.approx(0.5) and f["numerics"]["tolerance"] == 1e-4
    assert f["numerics"]["agreed_before"] == 5 + 3
    assert any("1 later value" in n for n in out["trace"]["notes"])


def test_tolerance_follows_dtype_and_rtol(tmp_path):
    """A relative error of 1e-3: beyond float32's 1e-4, within bfloat16's 3e-2; --rtol overrides."""
    mine = [row("forward", "output", "lin", [1.001, 2.002], dtype="bfloat16")]
    theirs = [row("forward", "output", "lin", [1.0, 2.0], dtype="bfloat16")]
    a, ref = write(tmp_path / "a.trace", {0: mine}), write(tmp_path / "r.trace", {0: theirs}, world=1)
    assert numerics(a, "--ref", ref)[0] == 0
    assert numerics(a, "--ref", ref, "--rtol", "1e-4")[0] == 1
    mine32 = [dict(mine[0], dtype="float32")]
    a32 = write(tmp_path / "a32.trace", {0: mine32})
    assert numerics(a32, "--ref", ref)[0] == 1
    assert numerics(a32, "--ref", ref, "--rtol", "2e-3")[0] == 0


def test_replica_divergence(tmp_path):
    """lin.weight's gradient is declared replicated over the 4 ranks; rank 2 holds another value.
    Its parameter diverges after it (a consequence: counted, not reported)."""
    good = per_rank({r: [0.1, 0.2] for r in range(4)}, [[0, 1, 2, 3]])
    bad = per_rank({0: [0.1, 0.2], 1: [0.1, 0.2], 2: [0.1, 0.25], 3: [0.1, 0.2]}, [[0, 1, 2, 3]])
    bad_param = per_rank({0: [0.9, 1.8], 1: [0.9, 1.8], 2: [0.9, 1.75], 3: [0.9, 1.8]}, [[0, 1, 2, 3]])
    rows0 = model_rows(ranks=good)
    rows1 = model_rows(ranks=good)
    rows1[3]["ranks"], rows1[4]["ranks"] = bad, bad_param
    rc, out = numerics(write(tmp_path / "a.trace", {0: rows0, 1: rows1}))
    assert rc == 1 and len(out["findings"]) == 1
    f = out["findings"][0]
    assert (f["kind"], f["module"], f["step"], f["phase"]) == ("replica_divergence", "lin.weight", 1, "backward")
    assert f["ranks"] == [0, 1, 2, 3] and f["culprit_ranks"] == [2]
    assert any("1 more value" in n for n in out["trace"]["notes"])
    rc, out = numerics(write(tmp_path / "ok.trace", {0: rows0, 1: model_rows(ranks=good)}))
    assert (rc, out["findings"]) == (0, [])


def test_fake_trace_is_bad_input(tmp_path):
    proc = run_tracer("analyzer", "numerics", write(tmp_path / "f.trace", {}, mode="fake"))
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert "fake-mode trace has no numerics" in line and "--mode local --numerics" in line


def test_local_trace_without_numerics_is_bad_input(tmp_path):
    proc = run_tracer("analyzer", "numerics", write(tmp_path / "l.trace", {}))
    assert proc.returncode == 2 and "recorded without --numerics" in one_line_error(proc)


def test_reference_with_no_parameter_in_common_is_bad_input(tmp_path):
    a = write(tmp_path / "a.trace", {0: [row("optimizer", "param", "lin.weight", [1.0, 2.0])]})
    ref = write(tmp_path / "r.trace", {0: [row("optimizer", "param", "emb.weight", [1.0, 2.0])]}, world=1)
    proc = run_tracer("analyzer", "numerics", a, "--ref", ref)
    assert proc.returncode == 2 and "no parameter in common (here lin.weight, in " in one_line_error(proc)


@pytest.mark.parametrize(
    "mine, theirs, ran_there, said",
    [
        # parallelize_module untied head.weight from emb.weight: the reference's head runs on the shared one
        (
            ["emb.weight", "head.weight"],
            ["emb.weight"],
            ["emb", "head"],
            "head.weight (2) is only in the trace: a weight tie",
        ),
        # a stage split that drops a layer: the module never runs here
        (
            ["lin.weight"],
            ["lin.weight", "gone.bias"],
            ["lin", "gone"],
            "gone.bias (1) is only in the reference: a layer missing?",
        ),
        (
            ["lin.weight", "extra.bias"],
            ["lin.weight"],
            ["lin"],
            "parameter extra.bias (1) is only in the trace: a layer added?",
        ),
    ],
)
def test_parameter_on_one_side_only_is_a_finding(tmp_path, mine, theirs, ran_there, said):
    """Exit 1 with parameter_mismatch, and the values both sides hold still compared: the first
    differing common one is found too. A side's modules are those whose outputs it recorded."""

    def rows(names, ran, bump=0.0):
        outputs = [row("forward", "output", m, [0.5]) for m in ran]
        return outputs + [row("optimizer", "param", n, [1.0 + bump] * (1 if n.endswith("bias") else 2)) for n in names]

    a = write(tmp_path / "a.trace", {0: rows(mine, [n.rpartition(".")[0] for n in mine], bump=0.5)})
    ref = write(tmp_path / "r.trace", {0: rows(theirs, ran_there)}, world=1)
    rc, out = numerics(a, "--ref", ref)
    kinds = [f["kind"] for f in out["findings"]]
    assert rc == 1 and kinds == ["parameter_mismatch", "numerics_divergence"]
    assert said in out["findings"][0]["message"]
    assert out["findings"][1]["module"] == ("emb.weight" if "emb.weight" in mine else "lin.weight")


def test_shape_of_a_common_parameter_differs_is_a_finding(tmp_path):
    a = write(tmp_path / "a.trace", {0: [row("optimizer", "param", "lin.weight", [1.0, 2.0])]})
    ref = write(tmp_path / "r.trace", {0: [row("optimizer", "param", "lin.weight", [1.0, 2.0], shape=[2, 1])]}, world=1)
    rc, out = numerics(a, "--ref", ref)
    assert rc == 1 and [f["kind"] for f in out["findings"]] == ["parameter_mismatch"]
    assert "has shape (2) here, (2, 1) in the reference" in out["findings"][0]["message"]


def test_unmapped_values_are_listed_never_compared(tmp_path):
    """Real mode writes an optimizer's own tensors (a ZeRO partition) unmapped: whatever their
    digests, they are no finding, and a note names them with the reason."""
    mine = [
        *model_rows(),
        dict(row("optimizer", "param", "param_groups.0.0", [9.0]), layout="unmapped: a ZeRO partition"),
    ]
    theirs = [*model_rows(), row("optimizer", "param", "param_groups.0.0", [1.0])]
    rc, out = numerics(
        write(tmp_path / "a.trace", {0: mine}), "--ref", write(tmp_path / "r.trace", {0: theirs}, world=1)
    )
    assert (rc, out["findings"]) == (0, [])
    notes = out["trace"]["notes"]
    assert any(
        "1 value(s) in the trace not compared, their layout unknown (a ZeRO partition): param_groups.0.0" in n
        for n in notes
    )


def test_bad_tolerance_is_bad_input(tmp_path):
    a = write(tmp_path / "a.trace", {0: model_rows()})
    proc = run_tracer("analyzer", "numerics", a, "--rtol", "-1")
    assert proc.returncode == 2 and "--rtol must be" in one_line_error(proc)


@pytest.mark.parametrize("ref_loss, grads, rule", [(4.0, [0.4, 0.8], "sum"), (1.0, [0.1, 0.2], "mean")])
def test_distinct_losses_combine_as_the_reference_does(tmp_path, ref_loss, grads, rule):
    """4 ranks, 4 batches: the trace holds the mean (1.0) of 4 distinct losses and each rank's
    own input gradients (their parts add up to [0.4, 0.8]). Against a reference loss of 4.0 the
    losses are summed and the gradients stand; against 1.0 they are averaged and the gradients
    are 4x the global ones."""
    loss = dict(row("forward", "loss", "", [1.0], shape=[]), layout="mean of 4")
    mine = [loss, row("backward", "grad_input", "lin", [0.4, 0.8])]
    theirs = [row("forward", "loss", "", [ref_loss], shape=[]), row("backward", "grad_input", "lin", grads)]
    rc, out = numerics(
        write(tmp_path / "a.trace", {0: mine}), "--ref", write(tmp_path / "r.trace", {0: theirs}, world=1)
    )
    assert (rc, out["findings"]) == (0, [])
    assert any(f"combine as their {rule} at step(s) 0" in n for n in out["trace"]["notes"])


def test_mixed_precision_step_takes_the_forward_dtype(tmp_path):
    """A float32 gradient 1e-3 off, in a step whose forward ran in bfloat16: within tolerance."""
    out_bf16 = row("forward", "output", "lin", [1.0, 2.0], dtype="bfloat16")
    mine = [out_bf16, row("backward", "grad", "lin.weight", [0.1001, 0.2002])]
    theirs = [out_bf16, row("backward", "grad", "lin.weight", [0.1, 0.2])]
    a, ref = write(tmp_path / "a.trace", {0: mine}), write(tmp_path / "r.trace", {0: theirs}, world=1)
    assert numerics(a, "--ref", ref)[0] == 0
    mine32 = [dict(out_bf16, dtype="float32"), mine[1]]
    assert numerics(write(tmp_path / "a32.trace", {0: mine32}), "--ref", ref)[0] == 1


def test_numerics_needs_local_mode(tmp_path):
    from conftest import program

    proc = run_tracer(
        "tracer", "record", "--script", program("dtensor"), "-n", "4", "--numerics", "-o", str(tmp_path / "x.trace")
    )
    assert proc.returncode == 2 and "--numerics needs --mode local or --mode real" in one_line_error(proc)


def test_report_has_a_numerics_section(tmp_path):
    a = write(tmp_path / "a.trace", {0: model_rows(grad=(0.1, 0.3))})
    ref = write(tmp_path / "ref.trace", {0: model_rows()}, world=1)
    html = tmp_path / "r.html"
    proc = run_tracer("analyzer", "report", a, "--ref", ref, "-o", str(html))
    assert proc.returncode == 0 and "1 numerics finding(s)" in proc.stdout, proc.stderr
    page = html.read_text()
    assert 'id="numerics"' in page and "numerics_divergence" in page and "lin.weight" in page
    proc = run_tracer("analyzer", "report", write(tmp_path / "f.trace", {}, mode="fake"), "--ref", ref, "-o", str(html))
    assert proc.returncode == 2 and "fake-mode trace has no numerics" in one_line_error(proc)
