"""CPU priority of follow mode's process tree: the live pipeline ahead of readers on one machine.

Linux with autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled`` = 1, the default
of most distributions' kernels, this machine's too) shares the CPU between *sessions* first:
each session (a terminal, a service started with ``setsid`` as ``scripts/follow.sh`` does, a
reader the benchmark starts in a session of its own) gets an equal share when both are busy,
however many processes it runs. Follow mode's twenty worker processes then got half of the two
cores whenever one SQL reader's JVM was busy: the freshness benchmark's 100-timestamp burst took
its workers 8.6-11.6 s beside a reader against 4.1 s alone (docs/benchmarks.md). A process's
nice value orders processes inside its session only; the session's weight is its autogroup's
nice (``/proc/<pid>/autogroup``, sched(7)). Containers are cgroups of their own, shared by their
cgroup weight instead (``cpu_shares`` in docker-compose.yml).

Raising a priority (a negative nice) needs CAP_SYS_NICE (root, or an RLIMIT_NICE that allows
it); without it nothing changes and :func:`raise_cpu_priority` says so. A process already
started below the default (``nice -n 19 dkm follow``) keeps what its user chose.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The default for ``dkm follow --nice``: a weight ~9x the default's (sched(7): each nice step
#: is ~1.25x), so follow mode gets ~90 % of a busy machine and a reader ~10 %.
FOLLOW_NICE = -10

AUTOGROUP = Path("/proc/self/autogroup")


def raise_cpu_priority(nice: int, autogroup: Path = AUTOGROUP) -> str:
    """Give this process (and every child started after it: Spark's JVM and its Python workers)
    the CPU nice value ``nice``, and its session's autogroup the same when this process leads
    the session; one line for the log saying what took effect.

    Nothing is changed for ``nice`` = 0 or when the process already runs at a nice other than 0
    (its user chose one).
    """
    if nice == 0:
        return "CPU priority: left as started (--nice 0)"
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current != 0:
        return f"CPU priority: left at nice {current}, as started"
    done, refused = [], []
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        done.append(f"nice {nice}")
    except PermissionError:
        refused.append("nice")
    if os.getsid(0) == os.getpid() and autogroup.exists():
        try:
            autogroup.write_text(f"{nice}\n")
            done.append(f"its session's autogroup nice {nice}")
        except PermissionError:
            refused.append("the session's autogroup nice")
        except OSError as exc:  # a kernel without autogroup scheduling refuses the write
            refused.append(f"the session's autogroup nice ({exc.strerror})")
    line = f"CPU priority: {', '.join(done)}" if done else "CPU priority: normal"
    if refused:
        line += (f" ({' and '.join(refused)} not raised to {nice}: that needs CAP_SYS_NICE;"
                 " readers on this machine share the CPU with follow mode equally)")
    return line

