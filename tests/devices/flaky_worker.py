"""The real timing worker, made to die: test infrastructure for tests/devices/test_remote.py, started as the
device's `worker` command. It logs every network it builds (`load`) and every timing request (`time`: one timing or a
paired measurement) to LOG, and
exits abruptly, as a killed worker or a dropped connection would, at the FIRST-th timing request of all its
incarnations, then each THEN timing requests after its last death; at most DEATHS times (counted in LOG), after
which it serves to the end.

    python tests/devices/flaky_worker.py LOG FIRST THEN DEATHS
"""

import os
import sys

import aows_worker

log, first, then, deaths = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
handle = aows_worker.Worker.handle


def dying(self, req):
    op = {"load": "load", "time": "time", "paired": "time"}.get(req.get("op"))
    if op:
        with open(log, "a") as f:
            f.write(op + "\n")
    if op == "time":
        with open(log) as f:
            events = f.read().split()
        died = events.count("died")
        since = events[len(events) - events[::-1].index("died"):] if died else events
        if since.count("time") >= (then if died else first) and died < deaths:
            with open(log, "a") as f:
                f.write("died\n")
            os._exit(1)
    return handle(self, req)


aows_worker.Worker.handle = dying
aows_worker.main([])
