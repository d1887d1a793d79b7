"""`analyzer lint`: advice on correct traces. Healthy layouts (every golden in traces/) give no
advice; each seeded program or placement gives exactly its advice, with the module, ranks and
per-step counts derived by hand below."""

import dataclasses
import glob
import json
import os
import subprocess

import polars as pl
import pytest
from conftest import BIN, REPO

from analyzer.cost.cluster import load_cluster
from analyzer.cost.model import collective_seconds
from analyzer.lint import KINDS, run_lint
from analyzer.lint.options import LintOptions, Placement, for_cluster
from analyzer.loader import load
from traceformat.ops import COLLECTIVE_OPS

GOLDENS = sorted(glob.glob(os.path.join(REPO, "traces", "*.trace")))
CONTRACT = ("kind", "severity", "message", "ranks", "culprit_ranks", "group", "seq", "module", "frame")


def _placed(rpn: int) -> LintOptions:
    return LintOptions(placement=Placement(ranks_per_node=rpn, assumed=False))


@pytest.mark.parametrize("path", GOLDENS, ids=[os.path.basename(p) for p in GOLDENS])
def test_golden_layouts_give_no_advice(path):
    """FSDP, HSDP, TP, EP, PP goldens (ours and TorchTitan's): 8 ranks per node (the default),
    on a cluster, and at 4 ranks per node (every tp / ep group of these has 2-4 consecutive ranks)."""
    t = load(path)
    for options in (LintOptions(), for_cluster(load_cluster("h100-dgx")), _placed(4)):
        found = run_lint(t, options).findings
        assert found == [], [f.message for f in found]


def test_tp_across_nodes_is_flagged_with_its_count_and_time():
    """hsdp_tp: tp groups {0,1}, {2,3}, ... With 1 rank per node each spans 2 nodes; with 2
    consecutive ranks per node none does. Per step per rank on tp (by hand, from the workload:
    2 layers, sequence parallel, selective AC): forward 5 all-gathers (attention, feed_forward x 2
    layers, output) + 5 reduce-scatters (embedding, attention, feed_forward x 2); backward 9
    all-gathers (5 + 4 recomputed) + 5 reduce-scatters + 5 all-reduces; 4 all-reduces outside
    (loss parallel x 3, grad norm): 33."""
    t = load(os.path.join(REPO, "traces", "hsdp_tp.trace"))
    assert run_lint(t, _placed(2)).findings == []
    (f,) = run_lint(t, _placed(1)).findings
    assert (f.kind.name, f.severity, f.group["label"], f.ranks, f.per_step) == (
        "cross_node_group",
        "advice",
        "tp",
        list(range(8)),
        33,
    )
    assert f.seconds_per_step is None and "1 rank per node" in f.message
    # on a cluster: the time is what those 33 cost across 2 nodes more than inside one
    cluster = load_cluster("h100-dgx", 1)
    (priced,) = run_lint(t, for_cluster(cluster)).findings
    tp = t.groups.filter(label="tp")["gid"].implode()
    rows = t.select("rank", "op", "group", "step", "in_bytes", "out_bytes", ops=sorted(COLLECTIVE_OPS)).filter(
        (pl.col("rank") == 0) & (pl.col("step") == 0) & pl.col("group").is_in(tp)
    )
    by_hand = 0.0
    for r in rows.iter_rows(named=True):
        size = max(r["in_bytes"], r["out_bytes"])
        by_hand += collective_seconds(str(r["op"]), size, 2, cluster, nodes=2, per_node=1)
        by_hand -= collective_seconds(str(r["op"]), size, 2, cluster, nodes=1, per_node=2)
    assert rows.height == 33 and priced.seconds_per_step == pytest.approx(by_hand, rel=1e-9)
    assert priced.to_json()["seconds_per_step"] == priced.seconds_per_step


def test_default_placement_is_8_per_node_and_says_so():
    """Without --cluster: 8 consecutive ranks per node, stated in the message."""
    t = load(os.path.join(REPO, "traces", "hsdp_tp.trace"))
    t16 = dataclasses.replace(t, header=dict(t.header))
    assert run_lint(t16).findings == []
    assert "8 consecutive ranks per node (assumed" in Placement().spell()


def test_wide_dtype_against_the_policy_in_the_header():
    """hsdp_tp reduces gradients in float32 as its policy says (TorchTitan's default): no advice.
    The same trace claiming a bfloat16 reduce policy: the FSDP reduce-scatters (4 units: tok_embeddings,
    layers.0, layers.1, norm+output) and HSDP's all-reduces over dp_replicate (one per unit) are
    float32, twice the policy's width: 4 + 4 per step."""
    t = load(os.path.join(REPO, "traces", "hsdp_tp.trace"))
    config = json.loads(json.dumps(t.header["config"]))
    config["training"]["mixed_precision_reduce"] = "bfloat16"
    edited = dataclasses.replace(t, header=dict(t.header, config=config))
    found = run_lint(edited).findings
    got = sorted((f.kind.name, f.op, f.group["label"], f.per_step, f.ranks == list(range(8))) for f in found)
    assert got == [
        ("wide_dtype", "all_reduce", "dp_replicate", 4, True),
        ("wide_dtype", "reduce_scatter_tensor", "fsdp", 4, True),
    ]
    assert all("bfloat16" in f.message for f in found)
    # on a cluster: what the same collectives would save at half the bytes
    cluster = load_cluster("h100-dgx", 1)  # every group crosses nodes here; only the dtype advice is looked at
    priced = {f.op: f for f in run_lint(edited, for_cluster(cluster)).findings if f.kind.name == "wide_dtype"}
    rs = edited.select("rank", "step", "op", "group", "in_bytes", "out_bytes", ops=["reduce_scatter_tensor"])
    fsdp = edited.groups.filter(label="fsdp")["gid"].implode()
    rs = rs.filter((pl.col("rank") == 0) & (pl.col("step") == 0) & pl.col("group").is_in(fsdp))
    assert rs.height == 4
    by_hand = sum(
        collective_seconds("reduce_scatter_tensor", b, 2, cluster, nodes=2, per_node=1)
        - collective_seconds("reduce_scatter_tensor", b // 2, 2, cluster, nodes=2, per_node=1)
        for b in rs["in_bytes"].to_list()
    )
    assert priced["reduce_scatter_tensor"].seconds_per_step == pytest.approx(by_hand, rel=1e-6)


def test_no_policy_no_dtype_judgement():
    t = load(os.path.join(REPO, "traces", "fsdp_tp.trace"))
    linted = run_lint(t)
    assert linted.findings == [] and any("mixed-precision" in n for n in linted.notes)


def test_a_unit_gathered_three_times_per_step_is_flagged():
    """fsdp.trace (reshard_after_forward, selective AC inside the units): each unit but the root
    is gathered once in forward and once in backward. Each rank's backward gather of layers.1 in
    step 0 is repeated (as a reshard and re-gather inside backward would do). With AC off in the
    header one repeat (1 + 2 = 3 gathers) is advice; with AC on, backward may gather twice per
    forward (a recompute), so one repeat is not, two (1 + 3 = 4) are."""
    t = load(os.path.join(REPO, "traces", "fsdp.trace"))
    ev = t.select("rank", "idx", "code", "op", "module", "phase", "step")
    again = ev.filter(
        (pl.col("op") == "all_gather_into_tensor")
        & (pl.col("module") == "layers.1")
        & (pl.col("phase") == "backward")
        & (pl.col("step") == 0)
    )
    assert again.height == 4  # one per rank

    def repeated(times: int, ac: str):
        extra = pl.concat([again] * times)
        last = t.stream.group_by("rank").agg(top=pl.col("idx").max())
        extra = extra.join(last, on="rank").with_columns(
            idx=(pl.col("top") + 1 + pl.int_range(pl.len()).over("rank")).cast(pl.Int32)
        )
        rows = t.stream.join(extra.select("rank", "idx", "code"), on=["rank", "code"], how="semi")
        rows = rows.filter(pl.col("step") == 0).unique(["rank", "code"], keep="first", maintain_order=True)
        added = extra.select("rank", "idx", "code").join(rows.drop("idx"), on=["rank", "code"])
        stream = pl.concat([t.stream, added.select(t.stream.columns)]).sort("rank", "idx")
        config = json.loads(json.dumps(t.header["config"]))
        config["activation_checkpoint"]["mode"] = ac
        return dataclasses.replace(t, stream=stream, header=dict(t.header, config=config), _events=None)

    assert run_lint(repeated(1, "selective")).findings == []
    for times, ac in ((2, "selective"), (1, "none")):
        (f,) = run_lint(repeated(times, ac)).findings
        assert (f.kind.name, f.module, f.ranks, f.group["label"]) == (
            "repeated_param_gather",
            "layers.1",
            [0, 1, 2, 3],
            "world",
        )
        assert f"gathered {2 + times} times per step" in f.message


def test_every_kind_is_advice():
    assert {k.severity for k in KINDS.values()} == {"advice"}


# --- recorded programs -------------------------------------------------------------------------


def test_unbucketed_gradients_from_backward_hooks(recorded):
    """lint_unbucketed: 6 Linear layers under `blocks`, each parameter's gradient all-reduced on
    its own from a hook in backward: 12 all_reduce per step on the world group, synchronous. Two
    pieces of advice, both under blocks, every rank: unbucketed, and blocking in backward."""
    path, _ = recorded("lint_unbucketed", 4, "local")
    found = run_lint(load(path)).findings
    got = [(f.kind.name, f.module, f.ranks, f.per_step, f.group["label"], f.op) for f in found]
    assert got == [
        ("unbucketed_collectives", "blocks", [0, 1, 2, 3], 12, "world", "all_reduce"),
        ("blocking_backward_collective", "blocks", [0, 1, 2, 3], 12, "world", "all_reduce"),
    ]
    assert all(f.frame.endswith("lint_unbucketed.py:37 in reduce_grad") for f in found)


def test_bucketing_saving_on_a_cluster(recorded):
    """On h100-dgx (4 ranks, one node): the 12 calls cost 12 times the model's one-call time; one
    bucket of their total bytes costs once: the advice's time is the difference, by hand from
    the cost model (mostly 11 latencies)."""
    path, _ = recorded("lint_unbucketed", 4, "local")
    t = load(path)
    cluster = load_cluster("h100-dgx")
    found = {f.kind.name: f for f in run_lint(t, for_cluster(cluster)).findings}
    calls = t.select("rank", "step", "op", "phase", "in_bytes", ops=["all_reduce"]).filter(
        (pl.col("rank") == 0) & (pl.col("step") == 0) & (pl.col("phase") == "backward")
    )
    assert calls.height == 12
    sizes = calls["in_bytes"].to_list()
    each = sum(collective_seconds("all_reduce", b, 4, cluster) for b in sizes)
    assert found["blocking_backward_collective"].seconds_per_step == pytest.approx(each, rel=1e-9)
    saved = each - collective_seconds("all_reduce", sum(sizes), 4, cluster)
    assert found["unbucketed_collectives"].seconds_per_step == pytest.approx(saved, rel=1e-6)


def test_report_has_the_advice(recorded, tmp_path):
    """`analyzer report` shows lint's advice (priced on its cluster) in its own section."""
    path, _ = recorded("lint_roundtrip", 4, "local")
    out = tmp_path / "r.html"
    p = subprocess.run([os.path.join(BIN, "analyzer"), "report", path, "-o", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    html = out.read_text()
    section = html[html.index('id="advice"') :]
    assert "redistribute_roundtrip" in section[: section.index("</section>")]


def test_unbucketed_async_gradients_do_not_block(recorded):
    """The same with async_op=True, waited after backward: still unbucketed, no longer blocking."""
    path, _ = recorded("lint_unbucketed", 4, "local", args=("--async",))
    found = run_lint(load(path)).findings
    assert [(f.kind.name, f.module, f.per_step) for f in found] == [("unbucketed_collectives", "blocks", 12)]


def test_redistribute_and_back(recorded):
    """lint_roundtrip: proj does Shard(0) -> Replicate -> Shard(0) in one statement, twice (two
    forwards, no optimizer: one step): one all_gather_into_tensor (input [2, 8] float32: 64 B)
    per round trip. Its other redistribute (Shard(0) -> Replicate for a matmul) is not advised."""
    path, _ = recorded("lint_roundtrip", 4, "local")
    (f,) = run_lint(load(path)).findings
    assert (f.kind.name, f.module, f.ranks, f.per_step, f.group["label"]) == (
        "redistribute_roundtrip",
        "proj",
        [0, 1, 2, 3],
        2,
        "tp",
    )
    assert f.frame.endswith("lint_roundtrip.py:23 in forward") and "[S(0)] -> [R]" in f.message


def test_tp8_over_two_nodes(recorded):
    """tp.py on 8 ranks: one tp group of 8. At 4 ranks per node it spans 2 nodes: per step a
    forward all-gather (sequence-sharded input to w1) and reduce-scatter (w2's output), a backward
    all-gather (the reduce-scatter's gradient; the input needs none): 3 (the weights' scatter
    before the first forward is set-up, in no step). At 8 per node: no advice."""
    path, _ = recorded("tp", 8, "local")
    t = load(path)
    assert run_lint(t).findings == []
    (f,) = run_lint(t, _placed(4)).findings
    assert (f.kind.name, f.group["label"], f.ranks, f.per_step) == ("cross_node_group", "tp", list(range(8)), 3)


def test_cli_lint_exit_codes_and_json(recorded, tmp_path):
    path, _ = recorded("lint_roundtrip", 4, "local")
    run = lambda *a: subprocess.run([os.path.join(BIN, "analyzer"), "lint", *a], capture_output=True, text=True)  # noqa: E731
    p = run(path, "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    (f,) = out["findings"]
    assert all(k in f for k in CONTRACT) and f["severity"] == "advice" and out["cluster"] is None
    assert run(path, "--strict").returncode == 1
    priced = json.loads(run(path, "--json", "--cluster", "h100-dgx").stdout)
    assert priced["cluster"] == "h100-dgx" and priced["findings"][0]["seconds_per_step"] > 0
    bad = run(path, "--cluster", "no-such-cluster")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    golden = os.path.join(REPO, "traces", "hsdp_tp.trace")
    assert run(golden, "--strict").returncode == 0
