"""Put real mode in place in a rank process: the recording backend's groups carried out by gloo,
over a FileStore in the recording's parts folder that every rank process of the world opens.

A FileStore, not a TCPStore: no port to agree on before any process starts (a port picked by the
parent can be taken by the time rank 0 binds it), and it lies where the parts do, removed with
them. gloo's own connections go over loopback (backend.gloo_options).
"""

from __future__ import annotations

import os

import torch.distributed as dist

from tracer.capture import process_group as rpg
from tracer.real import backend

STORE = "store"
"""The FileStore's file name in the parts folder."""


def store_path(parts_dir: str) -> str:
    return os.path.join(parts_dir, STORE)


def install(parts_dir: str, world_size: int) -> None:
    """Serve the program's process groups with real gloo (reverted by uninstall)."""
    path = store_path(parts_dir)
    rpg.RecordingProcessGroup.serve = backend.create
    rpg.RecordingProcessGroup.store = lambda: dist.FileStore(path, world_size)


def uninstall() -> None:
    rpg.RecordingProcessGroup.serve = None
    rpg.RecordingProcessGroup.store = None
