"""Multi-node: a head and two worker nodes, one worker node removed mid-run -> the job recovers
and stays exactly-once. Runs `multinode_job.py` in a subprocess: it needs its own Ray cluster,
separate from the session's local Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.ray
def test_worker_node_lost_mid_run_recovers_exactly_once() -> None:
    proc = subprocess.run([sys.executable, os.path.join(HERE, "multinode_job.py")], capture_output=True,
                          text=True, timeout=420)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"scenario failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    out = json.loads(lines[-1][len("RESULT "):])
    from multinode_job import APPS, RECORDS, page_view

    assert out["nodes"] == 3
    assert out["local_path_error"] and "shared pyarrow.fs URI" in out["local_path_error"]
    before = out["placement_before"]
    assert len(set(before.values())) >= 2, f"tasks were not spread over nodes: {before}"
    assert out["worker_node"] in before.values(), "no task ran on the removed node"
    assert out["worker_node"] not in out["placement_after"].values()
    assert out["failures"] and any("died" in f for f in out["failures"]), out["failures"]
    apps = Counter(page_view(i)["app"] for i in range(RECORDS))
    expected = Counter((app, c) for app, n in apps.items() for c in range(1, n + 1))
    assert Counter(tuple(r) for r in out["output"]) == expected
    assert out["state"] == dict(apps) and len(apps) == APPS
