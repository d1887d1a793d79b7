"""commtrace analyzer: load traces into polars frames, check them, render findings. No torch.

`from analyzer import load` is the notebook entry point; polars loads on first use so that
`analyzer --help` starts fast.
"""

from __future__ import annotations

__all__ = ["load"]


def load(path):
    """Load a trace (or a folder of per-rank parts) as an `analyzer.model.trace.Trace`."""
    from analyzer.loader import load as _load

    return _load(path)
