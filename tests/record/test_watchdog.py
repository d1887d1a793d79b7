"""#38 item 5: no silent hang. The watchdog's line (capture/watchdog.py) and a timed-out rank's
stack as faulthandler writes it (executors/stacks.py), on a real dump of a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tracer.capture import watchdog
from tracer.executors.stacks import main_thread_stack, stack_of_log


def test_the_line_names_the_op_the_group_and_the_ranks_waited_for():
    b = watchdog.Blocked(
        op="all_reduce", group=watchdog.describe_group("3", (0, 2, 4, 5, 6)), waits_for=(0, 4, 5, 6), since=10.0
    )
    watchdog._RANK[0] = 2
    assert (
        watchdog.line(b, 17.4)
        == "rank 2 waits in all_reduce on group 3 (ranks 0, 2, 4-6) for ranks 0, 4-6 (7 s so far)"
    )
    one = watchdog.Blocked(op="recv_object_list (its recv #0 on group 0)", group="", waits_for=(1,), since=0.0)
    assert (
        watchdog.line(one, 5.0) == "rank 2 waits in recv_object_list (its recv #0 on group 0) for rank 1 (5 s so far)"
    )
    assert [watchdog.ranks_text(r) for r in ((), (3,), (0, 1), (0, 1, 2), (5, 1, 2, 3, 9))] == [
        "none",
        "3",
        "0, 1",
        "0-2",
        "1-3, 5, 9",
    ]


def test_a_call_marked_blocking_is_the_one_running_until_it_returns():
    with watchdog.blocking("new_group", "a new group (ranks 0-3)", [1, 2, 3]) as b:
        assert watchdog._NOW[-1] is b and b.waits_for == (1, 2, 3)
    assert b not in watchdog._NOW


PROGRAM = textwrap.dedent(
    """
    import faulthandler, sys, threading, time

    def helper():
        time.sleep(30)

    def stuck():
        faulthandler.dump_traceback(sys.stderr, all_threads=True)

    threading.Thread(target=helper, daemon=True).start()
    time.sleep(0.2)
    stuck()
    """
)


def test_the_main_threads_stack_is_read_from_a_real_faulthandler_dump(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    log = tmp_path / "job.log"
    with open(log, "w") as f:
        f.write("some output of the program\n")
        f.flush()
        subprocess.run([sys.executable, str(script)], stderr=f, check=True, timeout=60)
    text = log.read_text()
    assert text.count("most recent call first") == 2  # the helper thread and the main thread
    frames = main_thread_stack(text)
    assert [(os.path.basename(p), line, name) for p, line, name in frames] == [
        ("prog.py", 8, "stuck"),
        ("prog.py", 12, "<module>"),
    ]
    lines, at = stack_of_log(str(log), str(tmp_path))
    assert lines == ["prog.py:8 in stuck", "prog.py:12 in <module>"] and at == "prog.py:8 in stuck"
    assert stack_of_log(str(tmp_path / "missing.log"), str(tmp_path)) == ([], "")
