"""analyzer diff: identical recordings are equal; FSDP resharding shows its extra backward
all-gathers per unit; different layouts compare by volume; a one-rank extra collective is
reported at its rank and position. Model sizes: see test_workload_patterns.py."""

import json
import os
import subprocess
import sys

import polars as pl
import pytest
from conftest import BIN, REPO, program

from analyzer.compare.diff import diff_traces
from analyzer.compare.normalize import Options, normalize
from analyzer.loader import load
from tracer.record.golden import record_example

AG = "all_gather_into_tensor"
FSDP_TOML = os.path.join(REPO, "examples", "fsdp.toml")
# parameters per FSDP unit (gathered in bf16): tok_embeddings 8192, each block 49280, [norm, output] 8256
UNITS = {"tok_embeddings": 8192, "layers.0": 49280, "layers.1": 49280, "norm, output": 8256}


def _toml(tmp_path, name, replace: dict) -> str:
    text = open(FSDP_TOML).read()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return str(path)


def _record(tmp_path, toml: str) -> str:
    out = str(tmp_path / (os.path.basename(toml) + ".trace"))
    record_example(toml, out, REPO)
    return out


def test_same_config_recorded_twice_is_identical_after_normalization(tmp_path, workload):
    a, _ = workload("fsdp")
    b = load(_record(tmp_path, FSDP_TOML))
    assert not a.events["ts"].equals(b.events["ts"])  # the raw traces do differ (timestamps)
    assert normalize(a).equals(normalize(b))
    d = diff_traces(a, b)
    assert d.equal and d.divergences == [] and (d.volume["calls_delta"] == 0).all()


@pytest.mark.records
def test_reshard_after_forward_adds_one_backward_all_gather_per_unit_per_step(tmp_path):
    # reshard false: every unit stays gathered after forward, so backward gathers nothing.
    # reshard true: every unit (root has no params) is freed after forward and re-gathered in
    # backward: 4 extra all-gathers per step per rank, one per unit: 2 steps x 4 ranks x 4 units.
    src = 'fsdp_reshard_after_forward = "default"'
    no = _record(tmp_path, _toml(tmp_path, "keep", {src: "fsdp_reshard_after_forward = false"}))
    yes = _record(tmp_path, _toml(tmp_path, "reshard", {src: "fsdp_reshard_after_forward = true"}))
    d = diff_traces(load(no), load(yes))
    assert not d.equal and len(d.divergences) == 1 and d.divergences[0].ranks == [0, 1, 2, 3]
    div = d.divergences[0]
    assert {r.kind for r in div.runs} == {"inserted"} and div.length_b - div.length_a == 8
    rows = normalize(load(yes)).filter(pl.col("rank") == 0)
    inserted = [p for r in div.runs for p in range(r.b_start, r.b_stop)]
    extra = rows.filter(pl.col("pos").is_in(inserted))
    assert (extra["op"] == AG).all() and (extra["phase"] == "backward").all()
    assert sorted(extra["module"].to_list()) == sorted(list(UNITS) * 2)  # each unit, once per step
    assert extra["step"].to_list() == [0] * 4 + [1] * 4
    ag_back = d.volume.filter((pl.col("op") == AG) & (pl.col("phase") == "backward")).row(0, named=True)
    per_rank_step = 2 * sum(UNITS.values())  # bytes of the gathered (full) bf16 parameters
    assert ag_back == {
        "dim": "world",
        "op": AG,
        "phase": "backward",
        "calls_a": 0,
        "calls_b": 32,
        "calls_delta": 32,
        "bytes_a": 0,
        "bytes_b": 8 * per_rank_step,
        "bytes_delta": 8 * per_rank_step,
    }
    others = d.volume.filter(~((pl.col("op") == AG) & (pl.col("phase") == "backward")))
    assert (others["calls_delta"] == 0).all() and (others["bytes_delta"] == 0).all()


@pytest.mark.records
def test_fsdp8_vs_fsdp4_tp2_compares_by_volume_per_dim(tmp_path):
    fsdp8 = _record(tmp_path, _toml(tmp_path, "fsdp8", {"world_size = 4": "world_size = 8"}))
    fsdp4tp2 = _record(
        tmp_path,
        _toml(
            tmp_path,
            "fsdp4tp2",
            {
                "world_size = 4": "world_size = 8",
                "data_parallel_shard_degree = -1   # fill: 4": "data_parallel_shard_degree = 4\n"
                "tensor_parallel_degree = 2",
            },
        ),
    )
    # FSDP over all 8 ranks runs on the default group ("world": every 8-rank dim reuses it), FSDP
    # 4 on "fsdp": an alias compares them as one dim
    d = diff_traces(load(fsdp8), load(fsdp4tp2), Options(aliases={"world": "fsdp"}))
    assert not d.equal
    v = {(r["dim"], r["op"], r["phase"]): r for r in d.volume.iter_rows(named=True)}
    # FSDP all-gathers: same count per rank on both (4 units forward, per step), on fsdp
    fwd = v["fsdp", AG, "forward"]
    assert fwd["calls_a"] == fwd["calls_b"] == 8 * 4 * 2
    assert fwd["bytes_a"] == 8 * 2 * 2 * sum(UNITS.values())  # each rank gathers every full bf16 parameter
    assert fwd["bytes_b"] < fwd["bytes_a"]  # with TP, a rank gathers only its TP shard
    tp_rows = [r for k, r in v.items() if k[0] == "tp"]
    assert tp_rows and all(r["calls_a"] == 0 and r["calls_b"] > 0 for r in tp_rows)
    assert not any(k[0] == "tp" and r["calls_a"] for k, r in v.items())


@pytest.fixture(scope="module")
def branch_pair(recorded, tmp_path_factory):
    """rank_branch.py (rank 1 issues an extra all_reduce) and the same file with the branch off
    (same basename and lines, so frames pair up)."""
    with_branch, _ = recorded("rank_branch", 4)
    folder = tmp_path_factory.mktemp("nobranch")
    text = open(program("rank_branch")).read().replace("if dist.get_rank() == 1:", "if False:")
    (folder / "rank_branch.py").write_text(text)
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    out = str(folder / "nobranch.trace")
    record(RecordRequest(program=Program(script=str(folder / "rank_branch.py")), world_size=4, out=out, progress=False))
    return out, with_branch


def test_one_rank_extra_collective_at_its_rank_and_position(branch_pair):
    without, with_branch = branch_pair
    d = diff_traces(load(without), load(with_branch))
    assert len(d.divergences) == 1
    div = d.divergences[0]
    # comparable stream of rank 1 (group creation left out): all_reduce (line 7), the extra one
    # (line 9), all_reduce; in the trace, init_process_group comes first (idx 2)
    assert div.ranks == [1] and div.position_b == 1 and div.idx_b == 2 and div.n_runs == 1
    run = div.runs[0]
    assert (run.kind, run.a_start, run.a_stop, run.b_start, run.b_stop) == ("inserted", 1, 1, 1, 2)
    assert run.b_sigs == ["all_reduce world/4 float32 in=[[4]] out=[[4]] sum"]
    assert run.where["frame"] == "rank_branch.py:9 in <module>"
    assert div.event_b["frame"] == "rank_branch.py:9 in <module>"
    row = d.volume.row(0, named=True)
    assert (row["calls_a"], row["calls_b"], row["bytes_delta"]) == (8, 9, 16)


def test_cli_exit_codes_and_json(branch_pair):
    without, with_branch = branch_pair
    analyzer = os.path.join(BIN, "analyzer")
    same = subprocess.run([analyzer, "diff", without, without], capture_output=True, text=True)
    assert same.returncode == 0, same.stderr
    diff = subprocess.run([analyzer, "diff", without, with_branch, "--json"], capture_output=True, text=True)
    assert diff.returncode == 1, diff.stderr
    out = json.loads(diff.stdout)
    assert [(x["rank"], x["ranks"]) for x in out["divergences"]] == [(1, [1])]
    assert out["volume"][0]["calls_delta"] == 1 and out["equal"] is False
    text = subprocess.run([analyzer, "diff", without, with_branch], capture_output=True, text=True)
    assert text.returncode == 1 and "rank_branch.py:9" in text.stdout and "inserted" in text.stdout
    bad = subprocess.run([analyzer, "diff", without, "/no/such.trace"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr


def test_diff_modules_import_without_torch():
    code = (
        "import sys; import analyzer.cli, analyzer.compare.diff, analyzer.compare.normalize, analyzer.compare.golden, "
        "analyzer.render.console, analyzer.render.json; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
