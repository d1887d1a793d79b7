"""Executors: Ray tasks record what the local process pool records, and report failed or hung
ranks the same way; a recording sharded with --ranks joins into the full one with `tracer merge`;
a rank asked for alone gets the peers it waits on run too (helpers, not in the trace)."""

import os

import pytest
import ray  # the `test` extra installs it
from conftest import REPO, program, run_tracer, sig, stream

from analyzer.loader import load

SKIP = {"ts"}


def _same(a, b, ranks):
    for rank in ranks:
        x = [{k: v for k, v in e.items() if k not in SKIP} for e in stream(a, rank)]
        y = [{k: v for k, v in e.items() if k not in SKIP} for e in stream(b, rank)]
        assert x == y, rank


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray cluster of 2 CPUs for the module (it takes seconds to start)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _record(name, out, **kwargs):
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    return record(
        RecordRequest(program=Program(script=program(name)), world_size=4, out=str(out), progress=False, **kwargs)
    )


def test_ray_executor_records_what_the_local_pool_records(local_ray, recorded, tmp_path):
    local = load(recorded("collectives", 4)[0])
    res = _record("collectives", tmp_path / "ray.trace", executor="ray")
    assert res.errors == {}
    assert not os.path.exists(tmp_path / "ray.trace.parts")  # merged, parts removed
    _same(local, load(tmp_path / "ray.trace"), range(4))


def test_ray_executor_reports_failed_and_hung_ranks_per_rank(local_ray, tmp_path):
    res = _record("raises", tmp_path / "r.trace", executor="ray")
    assert list(res.errors) == [2] and "ValueError: bad batch on rank 2" in res.errors[2]
    assert "job_00002.log" in res.errors[2]
    # the timeout counts from the task's start (torch's import included): room for a loaded machine
    res = _record("hang", tmp_path / "h.trace", executor="ray", timeout=15)
    assert sorted(res.errors) == [0, 1, 2, 3] and all("timed out after 15 s" in e for e in res.errors.values())
    t = load(tmp_path / "h.trace")
    assert all([e["op"] for e in stream(t, r)].count("all_reduce") == 3 for r in range(4))  # kept


def test_unreachable_ray_cluster_is_one_line(tmp_path):
    p = run_tracer(
        "tracer",
        "record",
        "--script",
        program("collectives"),
        "-n",
        "2",
        "--executor",
        "ray",
        "--ray-address",
        "127.0.0.1:9",
        cwd=tmp_path,
        timeout=120,
    )
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith("error: --executor ray")
    assert "Traceback" not in p.stderr and not os.listdir(tmp_path)


def test_shards_recorded_with_ranks_merge_into_the_full_recording(tmp_path):
    for shard, ranks in (("full", "all"), ("a", "0-1"), ("b", "2,3")):
        p = run_tracer(
            "tracer",
            "record",
            "--script",
            program("collectives"),
            "-n",
            "4",
            "--ranks",
            ranks,
            "-o",
            f"{shard}.trace",
            cwd=tmp_path,
        )
        assert p.returncode == 0, p.stderr
    # (a folder of parts, as an interrupted shard leaves, is accepted too: test_bad_input)
    m = run_tracer("tracer", "merge", "a.trace", "b.trace", "-o", "all.trace", cwd=tmp_path)
    assert m.returncode == 0, m.stderr
    merged = load(tmp_path / "all.trace")
    assert merged.ranks == [0, 1, 2, 3] and not merged.missing_ranks
    _same(load(tmp_path / "full.trace"), merged, range(4))
    clash = run_tracer("tracer", "merge", "a.trace", "all.trace", "-o", "x.trace", cwd=tmp_path)
    assert clash.returncode == 2 and "rank 0 is in both a.trace and all.trace" in clash.stderr
    none = run_tracer("tracer", "merge", "nothing", "-o", "x.trace", cwd=tmp_path)
    assert none.returncode == 2 and "nothing: no such file or folder" in none.stderr


def test_a_pipeline_rank_recorded_alone_runs_the_peer_it_waits_on(tmp_path):
    # pp 2 x fsdp 2 x tp 2: rank 5 is on stage 1 and waits for stage 0's shapes from rank 1,
    # which nobody asked for; it used to wait for ever. Its small collectives (the loss, the
    # grad norm: fake/values.py) wait on their members' inputs, whose own groups chain to the
    # whole world: every other rank is run too, none put in the trace.
    example = os.path.join(REPO, "examples", "fsdp_tp_pp_1f1b.toml")
    p = run_tracer("tracer", "record", example, "--ranks", "5", "-o", "r5.trace", cwd=tmp_path, timeout=240)
    assert p.returncode == 0, p.stderr
    assert "also ran ranks 0, 1, 2, 3, 4, 6, 7, not asked for" in p.stdout + p.stderr
    alone, full = load(tmp_path / "r5.trace"), load(os.path.join(REPO, "traces", "fsdp_tp_pp_1f1b.trace"))
    assert alone.ranks == [5]
    assert [sig(e) for e in stream(alone, 5)] == [sig(e) for e in stream(full, 5)]
    assert not os.path.exists(tmp_path / "r5.trace.parts")


def test_ray_executor_runs_the_awaited_peers_too(local_ray, recorded, tmp_path):
    # torch.distributed.pipelining's stock 1F1B: the last stage (rank 3) waits for the shapes
    # stage 2 sends, which waits for stage 1's, ...: ranks 0-2 are run as helpers
    res = _record("pp_schedules", tmp_path / "ray.trace", executor="ray", ranks=[3])
    assert res.errors == {} and any("also ran ranks 0, 1, 2, not asked for" in n for n in res.notes)
    alone = load(tmp_path / "ray.trace")
    assert alone.ranks == [3]
    _same(load(recorded("pp_schedules", 4)[0]), alone, [3])
