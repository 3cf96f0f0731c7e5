"""The lab lock for the Python programs that bring the netns lab up (run_bench.py,
bounds_bench.py, tests/soak/run_soak.py): the same lock and the same rule as e2e_lock in
tests/e2e/lib.sh. The lab is one per machine, so each holds FERRY_LAB_LOCK
(/tmp/ferry-lab.lock) for its whole run, unless a process it descends from holds it already:
flock(1) around the command (`flock /tmp/ferry-lab.lock make bench`: /proc/locks names that
flock), or a test that runs it and exported FERRY_LAB_LOCK_HOLDER (its PID).
"""
import fcntl
import os

LOCK = os.environ.get("FERRY_LAB_LOCK", "/tmp/ferry-lab.lock")


def ancestors():
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return pids


def held_by_ancestor():
    mine = ancestors()
    holder = os.environ.get("FERRY_LAB_LOCK_HOLDER", "")
    if holder.isdigit() and int(holder) in mine:
        return True
    ino = os.stat(LOCK).st_ino
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            # "1: FLOCK  ADVISORY  WRITE 1234 00:1f:5678 0 EOF"
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == str(ino):
                if parts[4].isdigit() and int(parts[4]) in mine:
                    return True
    return False


def take(log):
    """The lock's descriptor (held until it is closed or the process exits), or None when an
    ancestor holds the lock. LOG says that it waits for another run."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if held_by_ancestor():
            os.close(fd)
            return None
        log(f"waiting for {LOCK} (another lab run)")
        fcntl.flock(fd, fcntl.LOCK_EX)
    os.environ["FERRY_LAB_LOCK_HOLDER"] = str(os.getpid())
    return fd
