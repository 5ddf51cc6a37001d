"""Who holds a lock: a token naming this process, and whether a token's process still lives.

A token is `<host>-<pid>-<start>`: the host is a short hash of the host name, `start` the
process start time in clock ticks since boot (from /proc), so a recycled pid is not taken for
the process that died. Only tokens of this host can be judged; others are left to deadlines.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache

__all__ = ["process_alive", "process_token", "token_pid"]

_PID_LIMIT = 4_194_304  # Linux's PID_MAX_LIMIT: pids stay below it on any system


@cache
def _host_id() -> str:
    # The host name as gethostname(2) gives it (socket.gethostname, whose import was 2.5 % of
    # a `boxmq put`): the same bytes, so tokens written before still name this host.
    return hashlib.sha1(os.uname().nodename.encode()).hexdigest()[:8]


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except OSError:
        return None
    # Field 22 (starttime); the command name (field 2) may hold spaces, so split after ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):  # a zombie holds nothing: it died, its parent has not reaped it
        return None
    return fields[19].decode()


def process_token(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{_host_id()}-{pid}-{_start_ticks(pid) or 0}"


def token_pid(token: str) -> str:
    """The pid a process token names, for a user to read; the text itself if it is no token."""
    parts = token.split("-")
    return parts[1] if len(parts) == 3 else token


def process_alive(token: str) -> bool | None:
    """True or False for a token of this host; None when it cannot be told (other host)."""
    parts = token.split("-")
    if len(parts) != 3 or not (parts[1].isascii() and parts[1].isdigit()):
        return None
    host, pid, start = parts[0], int(parts[1]), parts[2]
    if host != _host_id():
        return None
    if not 0 < pid < _PID_LIMIT:
        # No process has it (a lock suffix a script wrote): os.kill raised OverflowError out
        # of the sweep past a C long, and signalled this process's group for a pid of 0.
        return False
    ticks = _start_ticks(pid)
    if ticks is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return start == "0"  # no /proc here: a live pid is all we can check
    return ticks == start
