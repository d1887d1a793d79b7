"""How a folder of Flight Recorder dumps is read (the CLI's -j, --ray; hang's frontier window)."""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.sources.flight_recorder.window import CONTEXT


@dataclass(kw_only=True, slots=True)
class ReadOptions:
    frontier: bool = False
    """Keep only each group's frontier and `context` instances of history before it (what a hang
    verdict needs: window.py); False keeps every rank's whole history (check, summary)."""
    context: int = CONTEXT
    """Instances of history kept before each group's frontier (at least 1: each rank's last op
    on each of its groups)."""
    jobs: int | None = None
    """Processes decoding dumps (on Ray: tasks at once); None: every CPU this process may use."""
    ray: str | None = None
    """Decode and reduce on a Ray cluster (on_ray.py): "auto" (RAY_ADDRESS, else a running
    cluster), "local" (a cluster of this machine's CPUs, started and stopped here), or an
    address (host:port, ray://host:port). None: this machine's processes."""
