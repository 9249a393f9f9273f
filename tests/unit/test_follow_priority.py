"""Follow mode's CPU priority (dkmsks.jobs.priority): what it sets, what it leaves alone.

Each case runs in a child process of its own (a priority, once lowered, cannot be raised back
without privilege). A positive nice needs no privilege, so these run as any user; the refused
case stands in a missing CAP_SYS_NICE by a write that fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

pytestmark = pytest.mark.unit

# A kernel built with autogroup scheduling; a fresh session (each child below) has one then.
HAS_AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled").exists()

#: How a child reads its session's autogroup nice (sched(7)): None where the kernel has no
#: autogroup scheduling, or for a session older than autogroup itself (init's, where a
#: container's processes or CI's runner may live), for which the kernel prints nothing.
READ_AUTOGROUP = textwrap.dedent("""
    def autogroup_nice():
        try:
            text = open("/proc/self/autogroup").read()
        except OSError:
            return None
        _, found, nice = text.rpartition("nice")
        return int(nice) if found else None
""")


def _child(body: str, *, new_session: bool, prefix: list[str] | None = None) -> dict:
    """Run ``body`` (it ends by binding ``out``) in a fresh interpreter with ``autogroup_nice``
    and ``READ_AUTOGROUP`` (its source, for a grandchild); ``out`` read back."""
    code = "import json, os, sys\nfrom dkmsks.jobs.priority import raise_cpu_priority\n"
    code += f"READ_AUTOGROUP = {READ_AUTOGROUP!r}\nexec(READ_AUTOGROUP)\n"
    code += textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    done = subprocess.run([*(prefix or []), sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, start_new_session=new_session, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_session_leader_sets_its_nice_and_its_sessions_autogroup():
    out = _child("""
        line = raise_cpu_priority(7)
        child = os.popen(sys.executable + " -c 'import os; print(os.getpriority(os.PRIO_PROCESS, 0))'").read()
        out = {"line": line, "nice": os.getpriority(os.PRIO_PROCESS, 0), "child": int(child),
               "autogroup": autogroup_nice()}
    """, new_session=True)
    assert out["nice"] == 7
    assert out["child"] == 7  # a process started afterwards (Spark's JVM) inherits it
    assert "nice 7" in out["line"]
    if HAS_AUTOGROUP:
        assert out["autogroup"] == 7
        assert "autogroup nice 7" in out["line"]
    else:  # a kernel without autogroup scheduling: the nice alone, and the line says no more
        assert out["autogroup"] is None
        assert "autogroup" not in out["line"]


def test_a_process_that_does_not_lead_its_session_leaves_the_sessions_autogroup_alone():
    # The session is a fresh one (this test's own may be init's, which has no autogroup to
    # read): its leader starts a child that is no leader and reads the autogroup after it.
    out = _child("""
        import subprocess
        code = READ_AUTOGROUP + (
            "import json, os; from dkmsks.jobs.priority import raise_cpu_priority; "
            "print(json.dumps({'line': raise_cpu_priority(5), "
            "'nice': os.getpriority(os.PRIO_PROCESS, 0), 'autogroup': autogroup_nice()}))")
        before = autogroup_nice()
        member = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                           text=True, check=True).stdout)
        out = {"before": before, "member": member, "after": autogroup_nice(),
               "leader_nice": os.getpriority(os.PRIO_PROCESS, 0)}
    """, new_session=True)
    assert out["member"]["nice"] == 5
    assert out["leader_nice"] == 0
    assert "autogroup" not in out["member"]["line"]
    if HAS_AUTOGROUP:
        assert out["before"] == 0
        assert out["member"]["autogroup"] == 0  # the session is not the member's to change
        assert out["after"] == 0
    else:
        assert out["before"] is out["member"]["autogroup"] is out["after"] is None


def test_zero_changes_nothing():
    out = _child("""
        out = {"line": raise_cpu_priority(0), "nice": os.getpriority(os.PRIO_PROCESS, 0),
               "autogroup": autogroup_nice()}
    """, new_session=True)
    assert out["nice"] == 0
    assert out["line"] == "CPU priority: left as started (--nice 0)"
    if HAS_AUTOGROUP:
        assert out["autogroup"] == 0
    else:
        assert out["autogroup"] is None


def test_a_nice_its_user_chose_is_kept():
    out = _child("""
        out = {"line": raise_cpu_priority(-10), "nice": os.getpriority(os.PRIO_PROCESS, 0),
               "autogroup": autogroup_nice()}
    """, new_session=True, prefix=["nice", "-n", "3"])
    assert out["nice"] == 3
    assert out["line"] == "CPU priority: left at nice 3, as started"
    if HAS_AUTOGROUP:
        assert out["autogroup"] == 0
    else:
        assert out["autogroup"] is None


def test_without_the_privilege_nothing_changes_and_the_line_says_why(tmp_path):
    # What a process without CAP_SYS_NICE meets: both writes refused with EPERM.
    autogroup = tmp_path / "autogroup"
    autogroup.write_text("/autogroup-1 nice 0\n")
    out = _child(f"""
        import pathlib
        def refuse(*args, **kwargs):
            raise PermissionError(1, "Operation not permitted")
        os.setpriority = refuse
        pathlib.Path.write_text = refuse
        out = {{"line": raise_cpu_priority(-10, autogroup=pathlib.Path({str(autogroup)!r})),
               "nice": os.getpriority(os.PRIO_PROCESS, 0)}}
    """, new_session=True)
    assert out["nice"] == 0
    assert out["line"] == ("CPU priority: normal (nice and the session's autogroup nice not raised to -10: "
                           "that needs CAP_SYS_NICE; readers on this machine share the CPU with follow mode equally)")
    assert autogroup.read_text() == "/autogroup-1 nice 0\n"


def test_dkm_follow_offers_the_setting_with_its_default():
    from dkmsks.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["follow", "--nice", "0"])
    assert args.nice == 0
    assert parser.parse_args(["follow"]).nice is None  # then $DKMSKS_FOLLOW_NICE or the default


def test_a_bad_environment_value_is_a_clear_error():
    from dkmsks.commands.follow import _nice_from_environment
    from dkmsks.jobs.priority import FOLLOW_NICE

    assert _nice_from_environment(None) == FOLLOW_NICE
    assert _nice_from_environment(" ") == FOLLOW_NICE
    assert _nice_from_environment("5") == 5
    with pytest.raises(SystemExit, match="DKMSKS_FOLLOW_NICE must be a whole number .* got 'high'"):
        _nice_from_environment("high")
