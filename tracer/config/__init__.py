"""The job config of `tracer record CONFIG.toml` (TorchTitan v0.2.2 key names, checked strictly),
by concern: schema.py (the sections as dataclasses), parse.py (TOML -> JobConfig), check.py (the
values: degrees, shapes, schedules, the mode), keys.py (TorchTitan keys ignored or refused, the
dry-run length), quantize.py ([compile] / [quantize]), flavors.py ([model] flavor).

This module is the config's public face: what the recorder and the workload import. The
workload (tracer/workloads, whose line numbers are data) keeps importing `tracer.config`.
"""

from tracer.config.check import check_mode, notes
from tracer.config.parse import from_dict, load, read_toml
from tracer.config.schema import (
    SCHEDULES,
    STAGES_PER_RANK,
    WORKLOAD,
    JobConfig,
    Model,
    TracerSection,
    program,
    ranks_spec,
)

__all__ = [
    "SCHEDULES",
    "STAGES_PER_RANK",
    "WORKLOAD",
    "JobConfig",
    "Model",
    "TracerSection",
    "check_mode",
    "from_dict",
    "load",
    "notes",
    "program",
    "ranks_spec",
    "read_toml",
]
