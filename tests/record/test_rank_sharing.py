"""Sharing a recording between ranks identical up to relabelling (tracer/record/sharing.py,
traceformat/relabel.py): a shared recording of the built-in workload is the full recording on
every column but timestamps, group table included; uneven shapes and a relabelling that is
wrong fall back to recording the ranks in full."""

import os

import numpy as np
import pytest
from conftest import run_tracer

from traceformat.reader import read_trace
from traceformat.relabel import RelabelError, difference, relabel

MODEL = """
[model]
dim = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
vocab_size = {vocab}
multiple_of = 32

[training]
steps = 1
seq_len = 16
local_batch_size = {batch}

[parallelism]
{degrees}

[tracer]
compute = "fake"
"""
CONFIGS = {
    "fsdp_tp": "data_parallel_shard_degree = 4\ntensor_parallel_degree = 2",
    "hsdp_tp": "data_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 2\ntensor_parallel_degree = 2",
    "fsdp_tp_pp": 'pipeline_parallel_degree = 2\npipeline_parallel_schedule = "1F1B"\nmicrobatches = 4\n'
    "data_parallel_shard_degree = 2\ntensor_parallel_degree = 2",
}


def _toml(tmp_path, name: str, vocab: int = 128) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(MODEL.format(vocab=vocab, batch=4 if "pp" in name else 2, degrees=CONFIGS[name]))
    return str(path)


def _record(toml: str, out: str, share: bool = True, ranks=None):
    from tracer import config as config_mod
    from tracer.record import sharing as rank_sharing
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    cfg = config_mod.load(toml, world_size=8)
    asked = ranks or list(range(8))
    plan = rank_sharing.plan(cfg, mode="fake", compute="fake", ranks=asked)[0] if share else None
    res = record(
        RecordRequest(
            program=config_mod.program(cfg),
            world_size=8,
            out=out,
            ranks=asked,
            compute="fake",
            progress=False,
            config=cfg.to_dict(),
            share=plan,
        )
    )
    assert not res.errors, res.errors
    return res, plan


def _same(shared: str, full: str) -> None:
    a, b = read_trace(shared), read_trace(full)
    assert a.ranks == b.ranks
    assert sorted(a.groups.values(), key=lambda g: g["gid"]) == sorted(b.groups.values(), key=lambda g: g["gid"])
    for r in a.ranks:
        assert difference(a, r, b, r) == "", r
        assert a.ends[r] == b.ends[r]


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """Full recordings (--all-ranks) of the three configs, made once."""
    root = tmp_path_factory.mktemp("full")
    out = {}
    for name in CONFIGS:
        out[name] = str(root / f"{name}.trace")
        _record(_toml(root, name), out[name], share=False)
    return out


@pytest.mark.parametrize("name", list(CONFIGS))
def test_shared_recording_is_the_full_recording(tmp_path, full, name):
    res, plan = _record(_toml(tmp_path, name), str(tmp_path / "s.trace"))
    pp = "pp" in name
    # one representative per pipeline stage (coordinate 0 of dp_replicate, fsdp, tp), verified on
    # the stage's mesh corner; 8 ranks per stage or fewer: no random verification rank
    assert [(c.rep, c.verify) for c in plan.classes] == ([(0, [3]), (4, [7])] if pp else [(0, [7])])
    assert sorted(res.derived) == ([1, 2, 5, 6] if pp else [1, 2, 3, 4, 5, 6])
    line = "recorded 4 of 8 ranks, derived 4 by relabelling ranks 0, 4 (verified on ranks 3, 7)"
    assert res.notes == [line if pp else "recorded 2 of 8 ranks, derived 6 by relabelling rank 0 (verified on rank 7)"]
    header = read_trace(str(tmp_path / "s.trace")).header
    assert header["derived"] == (
        [{"rep": 0, "ranks": [1, 2], "verified_on": [3]}, {"rep": 4, "ranks": [5, 6], "verified_on": [7]}]
        if pp
        else [{"rep": 0, "ranks": [1, 2, 3, 4, 5, 6], "verified_on": [7]}]
    )
    _same(str(tmp_path / "s.trace"), full[name])


def test_asked_ranks_only_are_derived(tmp_path, full):
    res, plan = _record(_toml(tmp_path, "fsdp_tp"), str(tmp_path / "s.trace"), ranks=[2, 3, 5, 6])
    # recorded 0 and 7 (not asked: left out of the trace), derived the four asked
    assert plan.recorded == [0, 7] and sorted(res.derived) == [2, 3, 5, 6]
    t = read_trace(str(tmp_path / "s.trace"))
    assert t.ranks == [2, 3, 5, 6]
    f = read_trace(full["fsdp_tp"])
    for r in t.ranks:
        assert difference(t, r, f, r) == ""


def test_a_wrong_relabelling_is_caught_by_verification_and_records_in_full(tmp_path, full, monkeypatch):
    from tracer.record import sharing as rank_sharing

    right = rank_sharing.translation

    def drops_one(shape, src, dst):  # rank 1's image lost: sent where rank 2's goes
        m = right(shape, src, dst).copy()
        m[1] = m[2]
        return m

    monkeypatch.setattr(rank_sharing, "translation", drops_one)
    res, _ = _record(_toml(tmp_path, "fsdp_tp"), str(tmp_path / "s.trace"))
    assert res.derived == {}
    assert len(res.notes) == 1 and res.notes[0].startswith("rank sharing: rank 7 is not rank 0 relabelled (")
    assert res.notes[0].endswith("; recording its class of 0's ranks in full")
    assert "derived" not in read_trace(str(tmp_path / "s.trace")).header
    _same(str(tmp_path / "s.trace"), full["fsdp_tp"])


def test_a_difference_in_an_event_is_caught(full):
    """difference() names the first column that differs; relabel refuses what it cannot map."""
    from tracer.record.sharing import MeshShape, translation

    t = read_trace(full["hsdp_tp"])
    shape = MeshShape(sizes=(1, 2, 2, 2))
    assert difference(relabel(t, 0, 7, translation(shape, 0, 7)), 7, t, 7) == ""
    assert difference(t, 0, t, 7).startswith("column group differs at event ")
    m = translation(shape, 0, 7)
    m[[5, 6]] = m[[6, 5]]  # a permutation that is no mesh translation: no tp group maps onto a tp group
    with pytest.raises(RelabelError, match="has no image among its family's groups"):
        relabel(t, 0, 7, m)


def test_uneven_shapes_record_every_rank_and_say_so(tmp_path):
    # vocab 132 over tp 2 is 66 rows per TP shard, which FSDP 4 cannot split evenly
    toml = _toml(tmp_path, "fsdp_tp", vocab=132)
    p = run_tracer("tracer", "record", toml, "-n", "8", "--ranks", "0,5", "-o", str(tmp_path / "u.trace"))
    assert p.returncode == 0, p.stderr
    assert (
        "note: recording every rank: shapes differ across ranks: FSDP dim 0 of tok_embeddings / output "
        "(vocab / tp) = 66 over data_parallel_shard_degree=4 does not divide evenly (no sharing between ranks)"
    ) in p.stderr
    t = read_trace(str(tmp_path / "u.trace"))
    assert t.ranks == [0, 5] and "derived" not in t.header


def test_plan_applies_only_where_the_program_is_rank_symmetric(tmp_path):
    from tracer import config as config_mod
    from tracer.record import sharing as rank_sharing

    tt = os.path.join(os.path.dirname(os.path.dirname(__file__)), "torchtitan", "torchtitan_v0.2.2", "llama3_70b.toml")
    cfg = config_mod.load(tt, world_size=64)
    plan, why = rank_sharing.plan(cfg, mode="fake", compute="fake", ranks=list(range(64)), cores=4)
    # dp 8 x tp 8: one class; the corner 63 and, with a core to spare, one seeded-random rank
    assert why == "" and len(plan.classes) == 1 and plan.classes[0].rep == 0
    assert plan.classes[0].verify[0] == 63 and len(plan.classes[0].verify) == 2
    again = rank_sharing.plan(cfg, mode="fake", compute="fake", ranks=list(range(64)), cores=4)[0]
    assert plan.recorded == again.recorded
    # 2 cores: rank 0 and its corner fill them; a third rank would add a round
    two = rank_sharing.plan(cfg, mode="fake", compute="fake", ranks=list(range(64)), cores=2)[0]
    assert two.recorded == [0, 63] and len(two.classes[0].derive) == 62
    assert len(plan.classes[0].derive) == 61
    assert rank_sharing.plan(cfg, mode="fake", compute="real", ranks=list(range(64)))[0] is None
    assert rank_sharing.plan(cfg, mode="local", compute="fake", ranks=list(range(64)))[0] is None
    assert rank_sharing.plan(cfg, mode="fake", compute="fake", ranks=[0, 63])[1] == (
        "recording the asked-for ranks costs no more"
    )
    small = config_mod.load(_toml(tmp_path, "fsdp_tp"), world_size=8)
    small.job.script = "train.py"
    assert rank_sharing.plan(small, mode="fake", compute="fake", ranks=list(range(8)))[0] is None


def test_translation_maps_every_mesh_slice_onto_one():
    from tracer.record.sharing import MeshShape, translation

    shape = MeshShape(sizes=(2, 2, 2, 2))  # pp, dp_replicate, fsdp, tp
    m = translation(shape, 0, 7)  # offset (0, 1, 1, 1), pp kept
    assert list(m[:8]) == [7, 6, 5, 4, 3, 2, 1, 0] and list(m[8:]) == [15, 14, 13, 12, 11, 10, 9, 8]
    assert sorted(m) == list(range(16))
    tp_groups = {frozenset(range(i, i + 2)) for i in range(0, 16, 2)}
    assert {frozenset(int(m[r]) for r in g) for g in tp_groups} == tp_groups
    with pytest.raises(ValueError, match="different pipeline stages"):
        translation(shape, 0, 8)
    assert np.array_equal(translation(shape, 9, 9), np.arange(16))
