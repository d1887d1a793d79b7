"""How a recording job ended, as the executors report it: one Outcome per job.

The local executor turns its process's exit status into one (tracer/modes/run.py's run_job
exits 0 when the program finished, 3 when it raised, NEEDS_REAL_COMPUTE when fake compute met a
tensor value; a negative status is the signal that killed it), or says it timed out; the Ray
executor passes the worker's on, or says why its task never ran.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tracer.modes.run import NEEDS_REAL_COMPUTE

PROGRAM_RAISED = 3
"""run_job's exit status when the program raised (its part's end record says what)."""


class Ending(enum.Enum):
    FINISHED = "finished"
    """The program ran to its end."""
    PROGRAM_FAILED = "program_failed"
    """The program raised; the rank's part ends with the error."""
    NEEDS_REAL_COMPUTE = "needs_real_compute"
    """Fake compute met a tensor value it does not have: record the rank again, computing for real."""
    EXITED = "exited"
    """The process exited with another status."""
    KILLED = "killed"
    """A signal killed the process."""
    TIMED_OUT = "timed_out"
    """Killed after --timeout seconds."""
    NOT_STARTED = "not_started"
    """It never ran to an exit status (a Ray task that failed, or no status at all)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    ending: Ending
    """How the job ended."""
    status: int | None = None
    """The process's exit status (negative: the signal), where it had one."""
    reason: str = ""
    """The executor's own line on why the job never ran (NOT_STARTED)."""
    stack: tuple[str, ...] = ()
    """A timed-out process's main-thread Python stack when it was stopped, innermost first
    ('path:line in function', executors/stacks.py)."""
    at: str = ""
    """The innermost frame of that stack in the program's own code ('' if none)."""

    @classmethod
    def of_exit(cls, status: int | None) -> Outcome:
        """The outcome of a job process that exited with `status` (None: it never did)."""
        if status is None:
            return cls(Ending.NOT_STARTED)
        ending = {
            0: Ending.FINISHED,
            PROGRAM_RAISED: Ending.PROGRAM_FAILED,
            NEEDS_REAL_COMPUTE: Ending.NEEDS_REAL_COMPUTE,
        }
        return cls(ending.get(status, Ending.KILLED if status < 0 else Ending.EXITED), status)

    @classmethod
    def timed_out(cls, stack: tuple[str, ...] = (), at: str = "") -> Outcome:
        return cls(Ending.TIMED_OUT, stack=stack, at=at)

    @classmethod
    def not_started(cls, reason: str) -> Outcome:
        return cls(Ending.NOT_STARTED, reason=reason)

    @property
    def finished(self) -> bool:
        return self.ending is Ending.FINISHED

    @property
    def ran_to_end(self) -> bool:
        """Whether the process ended by itself, its part saying how (finished, or the program raised)."""
        return self.ending in (Ending.FINISHED, Ending.PROGRAM_FAILED)

    def header_status(self) -> str:
        """What the trace header's rank_status says of a job that did not end by itself."""
        if self.ending in (Ending.TIMED_OUT, Ending.KILLED, Ending.NOT_STARTED):
            return self.ending.value
        return "exited"

    def why(self, timeout: float | None) -> str:
        """One line: why the job did not finish."""
        if self.ending is Ending.TIMED_OUT:
            return f"timed out after {timeout:g} s (killed; events up to then are kept)"
        if self.ending is Ending.NOT_STARTED:
            return self.reason or "did not finish"
        if self.ending is Ending.KILLED:
            return f"killed by signal {-(self.status or 0)} (events up to then are kept)"
        return f"exited with status {self.status}"
