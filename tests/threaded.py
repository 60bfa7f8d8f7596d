"""Runs a test's body on many threads at once (tests/engine/test_concurrency.py, test_thread_sweep.py)."""
from __future__ import annotations

import sys
import threading
import time


def in_threads(body, n: int = 4, limit: float = 120.0) -> list:
    """body(i) on n threads started together; their results in order. Fails if one is still running after
    `limit` seconds (a deadlock) or raised."""
    results: list = [None] * n
    failed: list = []
    start = threading.Barrier(n)

    def run(i):
        try:
            start.wait()
            results[i] = body(i)
        except BaseException as e:  # noqa: BLE001  reported by the test
            failed.append(e)
    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often, as on a busy machine with bigger steps
    try:
        for t in ts:
            t.start()
        deadline = time.monotonic() + limit
        for t in ts:
            t.join(max(0.0, deadline - time.monotonic()))
    finally:
        sys.setswitchinterval(switch)
    assert not any(t.is_alive() for t in ts), f"threads still running after {limit} s: a deadlock"
    if failed:
        raise failed[0]
    return results
