"""TorchTitan v0.2.2's shipped train configs (tests/torchtitan_v0.2.2/, copied unchanged from the
v0.2.2 tag), read as they are: dry-run length, world size, flavors."""

import os

import pytest
from conftest import REPO
from test_workload_config import one_line_error, run_tracer

TT = os.path.join(REPO, "tests", "torchtitan_v0.2.2")


def test_a_minus_one_degree_without_a_world_size_asks_for_n(tmp_path):
    p = run_tracer("tracer", "record", os.path.join(TT, "llama3_8b.toml"), "-o", str(tmp_path / "x.trace"))
    assert p.returncode == 2
    assert "give -n N (or [tracer] world_size)" in one_line_error(p)
    assert not (tmp_path / "x.trace").exists()


def test_dry_run_length_defaults_to_two_steps_and_is_overridable():
    from tracer import config

    cfg = config.load(os.path.join(TT, "llama3_8b.toml"), world_size=8)
    assert cfg.training.steps == 1000 and cfg.steps == 2
    assert "recording 2 of training.steps=1000 steps" in cfg.steps_why()
    cfg = config.load(os.path.join(TT, "llama3_8b.toml"), world_size=8, steps=3)
    assert cfg.steps == 3 and "asked for" in cfg.steps_why()
    one = config.from_dict({"training": {"steps": 1}, "tracer": {"world_size": 2}})
    assert one.steps == 1 and one.steps_why() == "recording all 1 steps of training.steps=1"
    with pytest.raises(ValueError, match="tracer.steps must be at least 1"):
        config.from_dict({"tracer": {"world_size": 2, "steps": -1}})
