"""The Work a recorded collective returns: complete at once, as a real one looks once its
collective finished. Its wait records the wait of an async op; its future carries the output
tensors (DDP's Reducer reads the reduced bucket from it, comm hooks chain on it)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from tracer.capture.recorder import Recorder


class RecordingWork(dist.Work):
    """A completed Work, as a real one looks once its collective finished: wait() returns True and
    records the wait of an async op (once); result() and get_future() give the output tensors.

    DDP's C++ Reducer turns each bucket's Work into a future (getFuture) and reads the reduced
    bucket from its value at the end of backward (a value-less future crashes it); comm hooks
    chain on it with then(). A future handed out during a backward pass is waited, at the
    latest, when that pass ends, which is where DDP's finalize_backward waits on every bucket
    (in C++, out of our sight), so its wait is recorded there.
    """

    def __init__(
        self,
        recorder: Recorder,
        indices: dict[int, int],
        async_op: bool,
        keep: set | None = None,
        outputs: list | None = None,
        on_wait=None,
    ):
        super().__init__()
        self._recorder = recorder
        self._indices = indices if async_op else {}
        self._keep = keep
        self._outputs = list(outputs or [])
        self._on_wait = on_wait  # a carried recv takes its message here (channel.py)
        if keep is not None:
            keep.add(self)

    def wait(self, timeout=None) -> bool:
        if self._on_wait is not None:
            on_wait, self._on_wait = self._on_wait, None
            on_wait()
        if self._indices:
            self._recorder.waited(self._indices)
            self._indices = {}
        if self._keep is not None:
            self._keep.discard(self)
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self):
        return None

    def result(self) -> list:
        return self._outputs

    def get_future(self):
        fut = WorkFuture(self)
        if self._indices and torch._C._current_graph_task_id() != -1:
            wait_when_backward_ends(self)
        return fut


class WorkFuture(torch.futures.Future):
    """A completed future of a RecordingWork, or of a then() chain on one: its value is the
    output tensors (or the callback's result, or its error). wait() from Python records the
    work's wait, a chained future's included (it waits for the collective too). value() does
    not: it never blocks (a then() callback reads its parent's value on completion)."""

    def __init__(self, work: RecordingWork, chained: torch.futures.Future | None = None):
        super().__init__()
        self._work = work
        if chained is None:
            self.set_result(work.result())
            return
        try:
            self.set_result(chained.value())
        except Exception as e:  # the callback raised: wait() raises it, as torch's chain would
            self.set_exception(e)

    def wait(self):
        self._work.wait()
        return super().wait()

    def then(self, callback):
        return WorkFuture(self._work, super().then(callback))  # the callback runs now: we are complete


_backward_waits: dict = {"task": None, "works": []}


def wait_when_backward_ends(work: dist.Work) -> None:
    """Record `work`'s wait when the running backward pass ends (an autograd final callback,
    queued before DDP's own finalize_backward callback, so it runs first), unless it was
    waited on before."""
    task = torch._C._current_graph_task_id()
    if _backward_waits["task"] != task:
        _backward_waits["task"], _backward_waits["works"] = task, []

        def flush(works=_backward_waits["works"]):
            for w in works:
                w.wait()
            works.clear()
            if _backward_waits["works"] is works:
                _backward_waits["task"] = None

        torch.autograd.Variable._execution_engine.queue_callback(flush)
    _backward_waits["works"].append(work)
