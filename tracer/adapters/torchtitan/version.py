"""Which TorchTitan the adapter supports, and the one-line refusal of any other.

The CPU stand-ins (runtime.py) reach into TorchTitan's internals (its device selection, its
FlexAttention class, its config dataclasses), which change between releases: they are written
against 0.3.x, checked without importing TorchTitan (package metadata only).
"""

from __future__ import annotations

from tracer.adapters.torchtitan.errors import TorchTitanError

SUPPORTED = "0.3"
"""The release series the adapter is written against (any 0.3.x)."""


def installed() -> str | None:
    """The installed TorchTitan's version, or None."""
    from importlib import metadata

    try:
        return metadata.version("torchtitan")
    except metadata.PackageNotFoundError:
        return None


def check() -> str:
    """The installed version; ValueError (one line) when missing or outside SUPPORTED."""
    v = installed()
    if v is None:
        raise TorchTitanError("TorchTitan is not installed: pip install 'commtrace[torchtitan]' (after torch==2.13.0)")
    if v.split("+")[0].split(".")[:2] != SUPPORTED.split("."):
        raise TorchTitanError(
            f"TorchTitan {v} is not supported: the adapter supports {SUPPORTED}.x (pip install 'commtrace[torchtitan]')"
        )
    return v
