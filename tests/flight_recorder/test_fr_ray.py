"""`--ray`: dumps decoded and cut on a local Ray cluster of several worker processes give the
local run's trace and verdict (issue 39). Skipped where Ray is not installed (the test extra
installs it)."""

import os
import sys

import pytest
from conftest import HERE, REPO

from analyzer.hang import analyze
from analyzer.loader import load
from analyzer.sources.flight_recorder import on_ray
from analyzer.sources.flight_recorder.options import ReadOptions

ray = pytest.importorskip("ray")
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, os.path.join(HERE, "flight_recorder"))
import corpus  # noqa: E402
import fr_scale_synth  # noqa: E402

WORKERS = 3


@pytest.fixture(scope="module")
def cluster():
    for attempt in range(3):  # Ray gives its raylet 30 s to register: a loaded machine may need a retry
        try:
            ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False, configure_logging=False)
            break
        except Exception as e:  # ray raises a bare Exception for "timed out during startup"
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(e):
                raise
    yield
    ray.shutdown()


def _verdict(report):
    return (
        [(f.kind.name, f.culprit_ranks, f.message) for f in report.findings],
        {r: (b.key, b.waits_for) for r, b in report.stuck.items()},
    )


def test_ray_hang_and_check_are_the_local_ones(cluster, tmp_path):
    folder = tmp_path / "dumps"
    fr_scale_synth.generate(str(folder), 32, 200, stall=9, missing=1, truncated=1, jobs=1, seed=5)
    local = load(folder, fr=ReadOptions(frontier=True))
    remote = on_ray.load_path(str(folder), ReadOptions(frontier=True, ray="auto", jobs=WORKERS))
    assert _verdict(analyze(remote)) == _verdict(analyze(local))
    assert remote.events.equals(local.events) and remote.notes == local.notes
    assert 9 in {r for f in analyze(remote).findings if f.kind.name == "stalled_rank" for r in f.culprit_ranks}
    whole = on_ray.load_path(str(folder), ReadOptions(ray="auto", jobs=WORKERS))
    assert whole.events.equals(load(folder).events)


def test_ray_missing_dump_and_inferred_groups(cluster, tmp_path):
    """gloo's empty pg_config (groups inferred) and a dead rank's missing dump, from the corpus."""
    corpus.write(str(tmp_path))
    for case in ("nccl_missing_dump", "gloo_mesh_cross_group_timeout", "nccl_pipeline_wrong_peer"):
        local = analyze(load(tmp_path / case, fr=ReadOptions(frontier=True)))
        remote = analyze(on_ray.load_path(str(tmp_path / case), ReadOptions(frontier=True, ray="auto")))
        assert _verdict(remote) == _verdict(local), case
