"""Flink's own per-checkpoint figures, read from its REST API: alignment, start delay, bytes.

`read_checkpoints(base_url, job_id)` fetches, from a JobManager's REST endpoint, the job's
checkpoint summary (`/jobs/<id>/checkpoints`: `counts` and the `history` of every checkpoint, as
many as `web.checkpoints.history` keeps) and, for each COMPLETED checkpoint, the subtask details
of every vertex it waited for (`/jobs/<id>/checkpoints/details/<checkpoint>` lists them under
`tasks`; `.../subtasks/<vertex>` has each subtask's figures). The document:

    {"counts": {"completed": 12, "failed": 1, ...},
     "checkpoints": [{"id": 3, "end_to_end_duration": 41, "checkpointed_size": 9120, "persisted_data": 0,
                      "processed_data": 0, "alignment_buffered": 0, "checkpoint_type": "CHECKPOINT",
                      "tasks": {"<vertex name>": [{"index": 0, "status": "completed", "start_delay": 2,
                                                   "alignment": {"duration": 5, "persisted": 0, ...}, ...}]}}]}

Flink's units: durations in ms, sizes in bytes. `checkpoint_figures` turns it into a row's
columns, per completed checkpoint as barrierflow reports its own: alignment = the longest subtask
`alignment.duration` (barrierflow: the longest task alignment), start delay = the longest subtask
`start_delay` (the barrier's trip from the trigger to the last subtask), persisted bytes = the
checkpoint's `persisted_data` (in-flight data written by unaligned barriers), checkpointed bytes
= its `checkpointed_size`; `checkpoints_in_files` counts those Flink wrote as files (`external_path`
a `file:` URI; one kept in the JobManager's memory has none). Subtasks that had finished before a
checkpoint (bounded input) report no figures to it and are skipped. Standard library only: it runs in the PyFlink venv too.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

#: the fields of a `/checkpoints` history entry the document keeps
HISTORY_FIELDS = ("id", "checkpoint_type", "trigger_timestamp", "end_to_end_duration", "checkpointed_size",
                  "state_size", "persisted_data", "processed_data", "alignment_buffered", "external_path")


def get_json(base_url: str, path: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(f"{base_url.rstrip('/')}{path}", timeout=timeout) as response:
        return json.load(response)


def read_checkpoints(base_url: str, job_id: str, *, timeout: float = 10.0) -> dict[str, Any]:
    """The job's checkpoint document (see the module docstring) from the REST endpoint `base_url`."""
    job = get_json(base_url, f"/jobs/{job_id}", timeout)
    vertices = {v["id"]: v["name"] for v in job["vertices"]}
    summary = get_json(base_url, f"/jobs/{job_id}/checkpoints", timeout)
    checkpoints = []
    for entry in sorted(summary.get("history", []), key=lambda c: c["id"]):
        if entry.get("status") != "COMPLETED":
            continue
        details = f"/jobs/{job_id}/checkpoints/details/{entry['id']}"
        # the vertices the checkpoint waited for: one whose subtasks had all finished is not among them
        tasks = {vertices.get(vid, vid): get_json(base_url, f"{details}/subtasks/{vid}", timeout)["subtasks"]
                 for vid in get_json(base_url, details, timeout)["tasks"]}
        checkpoints.append({**{k: entry[k] for k in HISTORY_FIELDS if k in entry}, "tasks": tasks})
    return {"job": job_id, "state": job.get("state"), "counts": summary.get("counts", {}), "checkpoints": checkpoints}


def _percentile(values: list[float], q: float) -> float | None:
    from benchmarks.report import percentile

    return percentile(sorted(values), q)


def checkpoint_figures(doc: dict[str, Any]) -> dict[str, Any]:
    """A row's REST columns from a `read_checkpoints` document: `alignment_time_p50/p99/max`,
    `start_delay_p50/max` (ms), `persisted_bytes` (sum) and `persisted_bytes_p50`,
    `checkpointed_bytes_p50`, over the completed checkpoints; `rest_checkpoints_completed`
    (Flink's count) and `rest_checkpoints_read` (the checkpoints these figures come from).

    Raises:
        ValueError: a completed checkpoint without any subtask figures, or a figure that is not a
            number >= 0 (naming the checkpoint and field).
    """
    alignments, delays, persisted, checkpointed = [], [], [], []
    in_files = sum(str(c.get("external_path", "")).startswith("file:") for c in doc["checkpoints"])
    for checkpoint in doc["checkpoints"]:
        where = f"Flink checkpoint {checkpoint.get('id')}"
        reported = [s for subtasks in checkpoint["tasks"].values() for s in subtasks if "alignment" in s]
        if not reported:
            raise ValueError(f"{where}: completed, but no subtask reported figures to it")
        alignments.append(max(_number(s["alignment"], "duration", where) for s in reported))
        delays.append(max(_number(s, "start_delay", where) for s in reported))
        persisted.append(_number(checkpoint, "persisted_data", where))
        checkpointed.append(_number(checkpoint, "checkpointed_size", where))
    return {
        "rest_checkpoints_completed": doc["counts"].get("completed"), "rest_checkpoints_read": len(alignments),
        "alignment_time_p50": _percentile(alignments, 50), "alignment_time_p99": _percentile(alignments, 99),
        "alignment_time_max": _percentile(alignments, 100),
        "start_delay_p50": _percentile(delays, 50), "start_delay_max": _percentile(delays, 100),
        "persisted_bytes": sum(persisted) if persisted else None, "persisted_bytes_p50": _percentile(persisted, 50),
        "checkpointed_bytes_p50": _percentile(checkpointed, 50), "checkpoints_in_files": in_files,
    }


def _number(doc: dict[str, Any], key: str, where: str) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{where}: field {key!r}: expected a number >= 0, got {value!r}")
    return float(value)
