"""Fake compute (FakeTensorMode: shapes only) records the same comm pattern as real compute:
every column of every event of every rank except timestamps, on the parallelisms whose
bookkeeping runs under it (FSDP2 / HSDP, TP + SP DTensor, pipelining p2p); and what it cannot
see (tensor values) falls back to real compute, rank by rank, with a note."""

import os

import pytest
from conftest import REPO, program, run_tracer, stream

from analyzer.compare.diff import diff_traces
from analyzer.loader import load

SKIP = {"ts", "rank", "label", "ranks"}


def _record(cfg_or_script, out, compute, world_size=None):
    from tracer import config
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    if cfg_or_script.endswith(".toml"):
        cfg = config.load(cfg_or_script)
        res = record(
            RecordRequest(
                program=config.program(cfg),
                world_size=cfg.world_size,
                out=out,
                config=cfg.to_dict(),
                compute=compute,
                progress=False,
            )
        )
    else:
        res = record(
            RecordRequest(
                program=Program(script=cfg_or_script), world_size=world_size, out=out, compute=compute, progress=False
            )
        )
    assert res.errors == {}, res.errors
    return load(out), res


def _same_streams(a, b):
    assert a.ranks == b.ranks
    for rank in a.ranks:
        x, y = stream(a, rank), stream(b, rank)
        assert len(x) == len(y), rank
        for i, (e, f) in enumerate(zip(x, y)):
            e = {k: v for k, v in e.items() if k not in SKIP}
            f = {k: v for k, v in f.items() if k not in SKIP}
            assert e == f, (rank, i)


@pytest.mark.parametrize("name", ["fsdp_tp_pp_1f1b", "fsdp_tp_pp_interleaved", "hsdp_tp"])
def test_fake_compute_records_the_same_comm_pattern(workload, name, tmp_path):
    real, _ = workload(name)  # real compute (shared with the pattern tests and the goldens)
    fake, res = _record(os.path.join(REPO, "examples", name + ".toml"), str(tmp_path / "fake.trace"), "fake")
    assert set(res.compute.values()) == {"fake"} and fake.header["compute"] == "fake" and not res.notes
    _same_streams(real, fake)  # incl. waits, module, phase, step and frame of every event
    golden = load(os.path.join(REPO, "traces", name + ".trace"))
    assert diff_traces(golden, fake).equal  # what `analyzer golden check` asks of it


def test_fake_compute_on_scripts_with_fsdp_and_tensor_parallel(recorded, tmp_path):
    # a user's program: init_device_mesh imported into its own namespace, FSDP2 / TP / DTensor
    for name in ("fsdp", "tp", "dtensor"):
        real = load(recorded(name, 4)[0])
        fake, _ = _record(program(name), str(tmp_path / f"{name}.trace"), "fake", world_size=4)
        _same_streams(real, fake)


def test_fake_compute_on_ddp(recorded, tmp_path):
    # DDP's C++ reducer: its metadata exchanges stay real, its gradient buckets fake (capture/ddp.py)
    real = load(recorded("ddp_no_sync", 4)[0])
    fake, res = _record(program("ddp_no_sync"), str(tmp_path / "ddp.trace"), "fake", world_size=4)
    assert set(res.compute.values()) == {"fake"} and not res.notes
    _same_streams(real, fake)


def test_tensor_values_fall_back_to_real_compute(tmp_path):
    # every rank reads a value (.item() on the loss, as a logging line would): fake compute
    # cannot give it, so each rank is recorded again with real compute, with a note
    p = run_tracer(
        "tracer",
        "record",
        "--script",
        program("item_branch"),
        "-n",
        "4",
        "--compute",
        "fake",
        "-o",
        "f.trace",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert "note: fake compute: 4 rank(s) read tensor values" in p.stderr and "ranks 0-3" in p.stderr
    assert "DataDependentOutputException" in p.stderr and "item_branch.py:" in p.stderr
    fake = load(tmp_path / "f.trace")
    assert fake.header["compute"] == "real" and "read tensor values" in fake.header["compute_why"]
    p = run_tracer("tracer", "record", "--script", program("item_branch"), "-n", "4", "-o", "r.trace", cwd=tmp_path)
    assert p.returncode == 0 and "note:" not in p.stderr
    _same_streams(load(tmp_path / "r.trace"), fake)
    assert [e["op"] for e in stream(fake, 0)].count("all_reduce") == 2  # the branch was taken


def test_auto_compute_choices():
    from tracer import config
    from tracer.record.compute import resolve

    ex = lambda name: config.load(os.path.join(REPO, "examples", name + ".toml"))
    assert resolve("auto", "fake", ex("fsdp"))[0] == "real"  # tiny model: fake dispatch costs more
    assert resolve("auto", "fake", ex("fsdp_ep"))[0] == "real"  # MoE: splits come from the routing
    assert resolve("auto", "fake", None)[0] == "real"  # a script
    assert resolve("auto", "local", ex("fsdp"))[0] == "real"
    big = ex("fsdp_tp_pp_1f1b")
    big.model.dim, big.training.seq_len, big.training.local_batch_size = 1024, 2048, 8
    assert resolve("auto", "fake", big)[0] == "fake"
    assert resolve("real", "fake", big) == ("real", "asked for")
    with pytest.raises(ValueError, match="needs --mode fake"):
        resolve("fake", "local", big)
    with pytest.raises(ValueError, match="--compute must be one of"):
        resolve("fast", "fake", big)


def test_bad_compute_is_one_line(tmp_path):
    bad = run_tracer("tracer", "record", os.path.join(REPO, "examples", "fsdp.toml"), "--compute", "fast", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr
    cfg = tmp_path / "c.toml"
    cfg.write_text('[tracer]\nworld_size = 2\ncompute = "gpu"\n')
    bad = run_tracer("tracer", "record", str(cfg), cwd=tmp_path)
    assert bad.returncode == 2 and "tracer.compute must be" in bad.stderr and "Traceback" not in bad.stderr


def test_functional_collective_of_a_python_constant_is_recorded_once(tmp_path):
    # torch.tensor(n) under FakeTensorMode keeps its value, and an op on constants only runs
    # for real: the collective must not also reach the process group (TorchTitan's
    # dist_sum(torch.tensor(ntokens_seen)) was recorded twice)
    script = tmp_path / "const_reduce.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "import torch.distributed._functional_collectives as funcol\n"
        "dist.init_process_group('gloo')\n"
        "x = funcol.all_reduce(torch.tensor(3, dtype=torch.int64), 'sum', dist.group.WORLD)\n"
        "funcol.wait_tensor(x)\n"
        "dist.all_reduce(torch.ones(2))\n"
    )
    real, _ = _record(str(script), str(tmp_path / "r.trace"), "real", world_size=2)
    fake, _ = _record(str(script), str(tmp_path / "f.trace"), "fake", world_size=2)
    assert [e["op"] for e in stream(fake, 0)].count("all_reduce") == 2
    _same_streams(real, fake)
