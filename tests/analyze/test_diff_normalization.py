"""analyzer diff's normalization (analyzer.compare.normalize.Options): mesh dims that name the same dim
(dp_shard ~ fsdp) compare equal, and group creation, mesh events and size-1 collectives stay out
of the first divergence unless asked for (--groups); goldens still compare everything."""

import json

import pytest
from conftest import program, run_tracer

from analyzer.compare.diff import diff_traces
from analyzer.compare.normalize import Options, normalize, parse_aliases
from analyzer.loader import load

pytestmark = pytest.mark.records  # the pair of traces is recorded (module fixture)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(A, B): A names the shard dim dp_shard; B names it fsdp and creates size-1 pp / tp dims,
    with one size-1 all_reduce per step. Per rank per step both issue the same all-gather and
    reduce-scatter on the 2-rank shard group."""
    root = tmp_path_factory.mktemp("names")
    out = []
    for name, args in (("a", ["dp_shard"]), ("b", ["fsdp", "--size-one"])):
        p = run_tracer(
            "tracer",
            "record",
            "--script",
            program("mesh_names"),
            "-n",
            "4",
            "-o",
            f"{name}.trace",
            "--",
            *args,
            cwd=root,
        )
        assert p.returncode == 0, p.stderr
        out.append(str(root / f"{name}.trace"))
    return out


def test_aliased_dims_and_size_one_noise_compare_equal(pair):
    a, b = load(pair[0]), load(pair[1])
    d = diff_traces(a, b)
    assert d.equal and d.divergences == []
    assert sorted(set(d.volume["dim"].to_list())) == ["fsdp"]  # dp_shard read as fsdp; no tp/1 row
    assert d.volume["calls_a"].to_list() == d.volume["calls_b"].to_list() == [8, 8]  # 4 ranks x 2 steps
    rows = normalize(b).filter(normalize(b)["rank"] == 0)
    assert rows["op"].to_list() == ["all_gather_into_tensor", "reduce_scatter_tensor"] * 2


def test_without_aliases_the_first_divergence_is_the_renamed_collective(pair):
    d = diff_traces(load(pair[0]), load(pair[1]), Options(aliases={}))
    assert not d.equal and len(d.divergences) == 1
    div = d.divergences[0]
    assert div.ranks == [0, 1, 2, 3] and div.position_a == div.position_b == 0
    assert div.event_a["sig"].startswith("all_gather_into_tensor dp_shard/2 float32")
    assert div.event_b["sig"].startswith("all_gather_into_tensor fsdp/2 float32")


def test_groups_option_shows_group_creation_and_size_one_collectives(pair):
    d = diff_traces(load(pair[0]), load(pair[1]), Options(groups=True, size_one=True))
    div = d.divergences[0]  # the same default group, then B creates its size-1 pp groups first
    assert (div.position_a, div.position_b) == (1, 1)
    assert div.context == ['init_process_group world/4 {"api":"init_process_group"}']
    assert div.event_a["sig"] == 'new_group dp_replicate/2 {"api":"new_group"}'
    assert div.event_b["sig"] == 'new_group pp/1 {"api":"new_group"}'
    assert ("tp", "all_reduce", "other") in {tuple(r) for r in d.volume.select("dim", "op", "phase").rows()}
    strict = diff_traces(load(pair[0]), load(pair[0]), Options.strict())
    assert strict.equal


def test_cli_alias_options(pair, tmp_path):
    p = run_tracer("analyzer", "diff", *pair, cwd=tmp_path)
    assert p.returncode == 0 and "same comm pattern" in p.stdout
    p = run_tracer("analyzer", "diff", *pair, "--no-aliases", "--json", cwd=tmp_path)
    assert p.returncode == 1
    assert json.loads(p.stdout)["divergences"][0]["event_b"]["sig"].startswith("all_gather_into_tensor fsdp/2")
    p = run_tracer("analyzer", "diff", *pair, "--no-aliases", "--alias", "dp_shard=fsdp", cwd=tmp_path)
    assert p.returncode == 0
    p = run_tracer("analyzer", "diff", *pair, "--groups", cwd=tmp_path)
    assert p.returncode == 1
    p = run_tracer("analyzer", "diff", *pair, "--alias", "dp_shard", cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.strip() == (
        "error: --alias expects OLD=NEW (a mesh dim name and the name to compare it as), got 'dp_shard'"
    )


def test_parse_aliases():
    assert parse_aliases(["a=b", " c = d "]) == {"a": "b", "c": "d"}
    with pytest.raises(ValueError, match="--alias expects OLD=NEW"):
        parse_aliases(["=b"])
