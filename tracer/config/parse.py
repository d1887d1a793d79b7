"""Reading a job config: a TOML (or its dict) into tracer/config/schema.py's dataclasses, checked
strictly. TorchTitan sections that cannot change a comm pattern (metrics, checkpoint, ...) and
TorchTitan keys of used sections that do not either (dataset, tokenizer_path, ...) are accepted
and ignored, so a real TorchTitan TOML records as is. Anything else is a ValueError with a
one-line message naming the key (the CLI exits 2 on it).
"""

from __future__ import annotations

import dataclasses
import os
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from tracer.config.check import check
from tracer.config.keys import (
    IGNORED_KEYS,
    IGNORED_SECTIONS,
    UNMODELLED,
    UNMODELLED_SECTIONS,
    did_you_mean,
    refuse_unmodelled,
    with_flavor,
)
from tracer.config.schema import JobConfig

_SECTIONS = {f.name: f.type for f in dataclasses.fields(JobConfig)}


def read_toml(path: str) -> dict:
    """The TOML as a dict; ValueError (one line) when missing or malformed."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ValueError(f"config not found: {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None


def load(path: str, world_size: int | None = None, steps: int | None = None) -> JobConfig:
    """Read and check a TOML job config; ValueError (one line, naming the key) on bad input.
    `world_size` and `steps` (the CLI's -n and --steps) override [tracer] world_size / steps."""
    raw = read_toml(path)
    for key, value in (("world_size", world_size), ("steps", steps)):
        if value is not None:
            if not isinstance(raw.get("tracer", {}), dict):
                raise ValueError("tracer: expected a [tracer] table")
            raw.setdefault("tracer", {})[key] = value
    cfg = from_dict(raw)
    base = os.path.dirname(os.path.abspath(path))
    if cfg.job.script is not None and not os.path.isabs(cfg.job.script):
        cfg.job.script = os.path.relpath(os.path.join(base, cfg.job.script))  # relative to the TOML
    return cfg


def _set_keys(target, section: str, values: dict) -> None:
    """Set the keys of one [section] (a dotted path for nested tables: quantize.linear.float8)."""
    fields = {f.name: f for f in dataclasses.fields(target)}
    for key, value in values.items():
        if key in IGNORED_KEYS.get(section, ()):
            continue
        if f"{section}.{key}" in UNMODELLED:
            refuse_unmodelled(section, {key: value})
            continue
        if key not in fields:
            raise ValueError(f"unknown key {section}.{key}{did_you_mean(key, fields)}")
        annotation = str(fields[key].type)  # a string: postponed annotations
        if annotation in _NESTED:  # a sub-table
            if not isinstance(value, dict):
                raise ValueError(f"{section}.{key}: expected a [{section}.{key}] table, got {type(value).__name__}")
            _set_keys(getattr(target, key), f"{section}.{key}", value)
            continue
        setattr(target, key, _typed(f"{section}.{key}", value, annotation))


_NESTED = frozenset({"QuantizedLinear", "Float8Linear"})
"""Field annotations that are TOML sub-tables."""


def from_dict(raw: dict) -> JobConfig:
    cfg = JobConfig()
    for section, values in raw.items():
        if section in IGNORED_SECTIONS:
            continue
        if section in UNMODELLED_SECTIONS:
            refuse_unmodelled(section, values)
            continue
        if section not in _SECTIONS:
            raise ValueError(f"unknown section [{section}]{did_you_mean(section, [*_SECTIONS, *IGNORED_SECTIONS])}")
        if not isinstance(values, dict):
            raise ValueError(f"{section}: expected a [{section}] table, got {type(values).__name__}")
        _set_keys(getattr(cfg, section), section, with_flavor(values) if section == "model" else values)
    check(cfg)
    return cfg


_TYPES = {
    "int": (int,),
    "float": (float, int),
    "str": (str,),
    "bool": (bool,),
    "list[str]": (list,),
    "list[int]": (list,),
    "None": (type(None),),
}


def _typed(key: str, value, annotation: str):
    """Check a TOML value against the field's annotation (a string: `from __future__ import annotations`)."""
    allowed = tuple(t for part in annotation.split("|") for t in _TYPES[part.strip()])
    if isinstance(value, bool) and bool not in allowed:  # bool is an int in Python, not in TOML
        allowed = ()
    if not isinstance(value, allowed):
        raise ValueError(f"{key}: expected {annotation.replace(' | None', '')}, got {type(value).__name__} {value!r}")
    if isinstance(value, list) and not all(isinstance(x, (str, int)) for x in value):
        raise ValueError(f"{key}: expected a list of {annotation.removeprefix('list[').rstrip(']')}")
    return float(value) if annotation.startswith("float") and isinstance(value, int) else value
