"""The user's line first, with the real frameworks (#38 item 3): where Accelerate / Lightning are
installed (the frameworks venv), a rank-0-only gather issued inside the framework is found with
the user's line first, then the framework's. Skipped where they are not installed."""

import importlib.metadata

import pytest
from conftest import program

from analyzer.checks import run_checks
from analyzer.loader import load

pytestmark = pytest.mark.frameworks

# (program, framework, the user's line, the framework's line that issues the all_gather, the
# framework version whose line that is)
CASES = [
    (
        "fw_accelerate_gather",
        "accelerate",
        "tests/programs/fw_accelerate_gather.py:11 in evaluate",
        "accelerate/utils/operations.py:355 in _gpu_gather_one",
        "1.15.0",
    ),
    (
        "fw_fabric_gather",
        "lightning",
        "tests/programs/fw_fabric_gather.py:10 in <module>",
        "lightning/fabric/utilities/distributed.py:247 in _all_gather_ddp_if_available",
        "2.6.6",
    ),
]


@pytest.mark.parametrize("name,framework,user,issued,version", CASES, ids=[c[0] for c in CASES])
def test_a_gather_inside_a_framework_names_the_users_line(tmp_path, name, framework, user, issued, version):
    pytest.importorskip(framework)
    if importlib.metadata.version(framework) != version:  # the framework's line is of this version
        pytest.skip(f"{framework} {importlib.metadata.version(framework)} installed, the lines are {version}'s")
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    out = str(tmp_path / f"{name}.trace")
    res = record(RecordRequest(program=Program(script=program(name)), world_size=4, out=out, progress=False))
    assert res.errors == {}, res.errors
    found = run_checks(load(out)).findings
    assert [(f.kind.name, f.culprit_ranks, f.detail) for f in found] == [("missing_collective", [0], "extra")]
    assert found[0].frames == {0: f"{user} via {issued}"}
    assert f"issued an extra all_gather on world (ranks 0-3) at {user} via {issued}," in found[0].message
