"""What a recording runs: a script (as `python FILE.py ARGS` would) or an entrypoint `pkg.mod:fn`."""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from dataclasses import dataclass, field


@dataclass(kw_only=True, slots=True)
class Program:
    script: str | None = None
    """Path of a Python file run as __main__, with sys.argv = [script, *args]."""
    args: list[str] = field(default_factory=list)
    """Arguments after `--` on the command line."""
    entrypoint: str | None = None
    """`package.module:function`, called with no arguments (instead of a script)."""

    def check(self) -> None:
        """Raise ValueError with a one-line message if the program cannot be found."""
        if self.script is not None:
            if not os.path.isfile(self.script):
                raise ValueError(f"script not found: {self.script}")
        elif self.entrypoint is not None:
            if ":" not in self.entrypoint:
                raise ValueError(f"entrypoint must look like 'package.module:function', got {self.entrypoint!r}")
        else:
            raise ValueError("nothing to record: give a script or an entrypoint")

    def run(self, init_globals: dict | None = None) -> None:
        """Run it; a script starts with `init_globals` in its namespace (local mode's `int`)."""
        if self.script is not None:
            path = os.path.abspath(self.script)
            sys.argv = [self.script, *self.args]
            sys.path[0] = os.path.dirname(path)
            runpy.run_path(path, init_globals=init_globals, run_name="__main__")
        else:
            assert self.entrypoint is not None  # check() demands a script or an entrypoint
            mod_name, fn_name = self.entrypoint.split(":", 1)
            sys.argv = [self.entrypoint, *self.args]
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            fn = getattr(importlib.import_module(mod_name), fn_name)
            fn()

    @property
    def label(self) -> str:
        return self.script or self.entrypoint or "?"
