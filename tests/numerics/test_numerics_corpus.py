"""The corpus of silent numerical bugs (tests/programs/numerics/), each with its healthy twin:
recorded with `--mode local --numerics` at world 4 and compared (`analyzer numerics --ref`) with
the healthy program's world-1 recording. Every rank issues the same collectives in the same
order in every one of them, so `analyzer check` has nothing to say; the numerics do.

Ground truth, from real gloo runs (`NUMERICS_PRINT=1 torchrun --nproc-per-node N PROGRAM.py
VARIANT`, CPU, torch 2.13; common.py prints each rank's values after the last of 2 SGD steps):

world 1 (every program but fsdp_clip, buggy or healthy alike): loss at step 1 0.811873317,
emb.weight sum -0.994991451, norm.weight sum 15.9731861, w2.weight sum -2.43294474.
fsdp_clip at world 1 (clipping to 0.05 changes the trajectory): loss 1.1968199, emb.weight
-1.7562402, norm.weight 15.9969656.

tp_partial (Partial output's local value used as the full one, i.e. a missing all-reduce)
  buggy, world 4: each rank its own loss (0.886510372, 0.884823501, 0.869666457, 0.87619102) and
  its own plain emb.weight (-0.823737481, -0.936983218, -0.966773354, -0.691787313); w2.weight
  (full) -3.69540926 against -2.43294474.
  healthy, world 4: loss 0.811873317 on every rank, emb.weight -0.994991421, w2.weight -2.43294455.
sp_norm (sequence-parallel norm weights kept as plain tensors)
  buggy, world 4: loss 0.810434341; norm.weight differs per rank: 15.9784098, 16.0370197,
  15.9595046, 15.9980484 (world 1: 15.9731861).
  healthy, world 4: loss 0.811873317, norm.weight 15.9731861 on every rank.
fsdp_clip (hand-written gradient clipping on each rank's local shard norm under FSDP2)
  buggy, world 4: loss 1.16874504 (world 1: 1.1968199), emb.weight -1.6964096 (-1.7562402).
  healthy, world 4: loss 1.1968199, emb.weight -1.75624021.
grad_factor (dp x tp = 2 x 2, gradients averaged over dp divided by the world size)
  buggy, world 4: loss 0.94436717, emb.weight -1.26920142 (every rank the same).
  healthy, world 4: loss 0.811873317, emb.weight -0.994991327.

Local mode and real mode reproduce those figures (test_recorded_values_match_gloo): the
recording is of the program gloo runs.
"""

from __future__ import annotations

import json
import os

import polars as pl
import pytest
from conftest import PROGRAMS, run_tracer

pytestmark = pytest.mark.records

CORPUS = os.path.join(PROGRAMS, "numerics")

# program -> (first numerics_divergence: module, step, phase), replica_divergence's first FQN or None
EXPECTED = {
    "tp_partial": (("w2", 0, "forward"), "emb.weight"),
    "sp_norm": (("norm.weight", 0, "backward"), "norm.weight"),
    "fsdp_clip": (("emb.weight", 0, "backward"), None),
    "grad_factor": (("emb.weight", 0, "backward"), None),
}

# figures of the real gloo runs (module docstring): program, variant -> parameter -> sum after step 1;
# a list: each rank's own value of a plain (replicated) parameter
GLOO = {
    ("tp_partial", "buggy"): {"emb.weight": [-0.823737481, -0.936983218, -0.966773354, -0.691787313]},
    ("tp_partial", "healthy"): {"emb.weight": -0.994991421, "w2.weight": -2.43294455},
    ("sp_norm", "buggy"): {"norm.weight": [15.9784098, 16.0370197, 15.9595046, 15.9980484]},
    ("sp_norm", "healthy"): {"norm.weight": [15.9731861] * 4},
    ("fsdp_clip", "buggy"): {"emb.weight": -1.6964096},
    ("fsdp_clip", "healthy"): {"emb.weight": -1.75624021},
    ("grad_factor", "buggy"): {"emb.weight": -1.26920142},
    ("grad_factor", "healthy"): {"emb.weight": -0.994991327},
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """corpus(program, variant, world, mode="local") -> path of its --numerics recording (cached)."""
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    root = tmp_path_factory.mktemp("numerics")
    cache: dict = {}

    def get(name: str, variant: str, world: int, mode: str = "local") -> str:
        if (name, variant, world, mode) not in cache:
            out = str(root / f"{name}-{variant}-{world}-{mode}.trace")
            res = record(
                RecordRequest(
                    program=Program(script=os.path.join(CORPUS, name + ".py"), args=[variant]),
                    world_size=world,
                    out=out,
                    mode=mode,
                    numerics=True,
                    progress=False,
                )
            )
            assert res.errors == {}, res.errors
            cache[name, variant, world, mode] = out
        return cache[name, variant, world, mode]

    return get


def numerics(trace: str, ref: str) -> tuple[int, dict]:
    proc = run_tracer("analyzer", "numerics", trace, "--ref", ref, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize("mode", ["local", "real"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_buggy_gives_the_first_divergence(corpus, name, mode):
    """In real mode (a gloo process per rank, each digesting its own shard, combined at merge)
    as in local mode (one process holding every shard)."""
    (module, step, phase), replica = EXPECTED[name]
    rc, out = numerics(corpus(name, "buggy", 4, mode), corpus(name, "healthy", 1))
    assert rc == 1
    first = out["findings"][0]
    assert (first["kind"], first["module"], first["step"], first["phase"]) == (
        "numerics_divergence",
        module,
        step,
        phase,
    )
    assert first["numerics"]["rel_error"] > first["numerics"]["tolerance"]
    replicas = [f for f in out["findings"] if f["kind"] == "replica_divergence"]
    if replica is None:
        assert replicas == []
    else:
        assert replicas and replicas[0]["module"] == replica and replicas[0]["step"] == 0
        assert replicas[0]["ranks"] == [0, 1, 2, 3]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_healthy_twin_has_no_finding(corpus, name):
    rc, out = numerics(corpus(name, "healthy", 4), corpus(name, "healthy", 1))
    assert (rc, out["findings"]) == (0, [])


def test_healthy_twin_in_real_mode_against_a_real_reference(corpus):
    rc, out = numerics(corpus("grad_factor", "healthy", 4, "real"), corpus("grad_factor", "healthy", 1, "real"))
    assert (rc, out["findings"]) == (0, [])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_mode_digests_are_local_modes_row_for_row(corpus, name):
    """The same values in the same order with the same layouts, replica groups and per-rank
    digests: the combination at merge is local mode's rule (up to gloo's summation order)."""
    from analyzer import load

    real, local = load(corpus(name, "buggy", 4, "real")), load(corpus(name, "buggy", 4))
    assert real.numerics is not None and local.numerics is not None
    key = ["step", "phase", "what", "name", "occ", "layout", "numel"]
    assert real.numerics.select(key).to_dicts() == local.numerics.select(key).to_dicts()
    for col in ("sum", "sumsq", "amax"):
        assert real.numerics[col].to_list() == pytest.approx(local.numerics[col].to_list(), rel=1e-5, abs=1e-6)
    assert real.replicas is not None and local.replicas is not None
    assert (
        real.replicas.select("step", "seq", "rank").to_dicts()
        == local.replicas.select("step", "seq", "rank").to_dicts()
    )


def test_buggy_at_world_one_is_the_reference(corpus):
    """At world 1 the bug does nothing: the buggy program matches the healthy one."""
    rc, out = numerics(corpus("sp_norm", "buggy", 1), corpus("sp_norm", "healthy", 1))
    assert (rc, out["findings"]) == (0, [])


@pytest.mark.parametrize(
    "key, mode", [(k, "local") for k in sorted(GLOO)] + [(k, "real") for k in sorted(GLOO) if k[1] == "buggy"]
)
def test_recorded_values_match_gloo(corpus, key, mode):
    """The recorded digests after the last step are the real gloo run's values."""
    from analyzer import load

    t = load(corpus(*key, 4, mode))
    assert t.numerics is not None and t.replicas is not None
    last = t.numerics.filter((pl.col("what") == "param") & (pl.col("step") == 1))
    for name, want in GLOO[key].items():
        row = last.filter(pl.col("name") == name)
        if isinstance(want, list):
            per_rank = t.replicas.join(row.select("step", "seq"), on=["step", "seq"]).sort("rank")["sum"].to_list()
            assert per_rank == pytest.approx(want, rel=2e-7, abs=1e-6)
        else:
            assert row["sum"].to_list() == [pytest.approx(want, rel=2e-7, abs=1e-6)]
