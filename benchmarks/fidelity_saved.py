"""A saved `benchmarks.fidelity` run read back: what `--predict-from PATH` predicts again.

The JSON a fidelity run writes holds everything a prediction needs: the benchmark profiles that
sized the runs (`bench_profile`, `nexmark_profile`), the fitted `CostProfile` per scenario
(`profiles`; on Ray one per round too, `round_profiles`) and every measured cell (`cells[].measured_runs`, one value per repeat). `load`
turns it into a `SavedRun`; `benchmarks.fidelity` then runs only the (deterministic) simulator
with the profiles as saved and compares with the saved measurements, so the cost model can be
worked on without measuring again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import checkpoint_modes as cm
from benchmarks import nexmark
from runtime.calibration.profile import CostProfile, ProfileError


class SavedRunError(ValueError):
    """A saved fidelity JSON that cannot be predicted again; the message names the file and field."""


@dataclass
class SavedRun:
    """A fidelity run's sizes, profiles and measurements."""

    path: str
    measure: str
    quick: bool
    repeat: int
    bench: cm.Profile
    nexmark_bench: nexmark.Profile | None
    #: scenario -> its fitted profile (the first round's), in the saved order
    profiles: dict[str, CostProfile]
    #: scenario -> its profile of every round that calibrated (one when calibrated once)
    round_profiles: dict[str, list[CostProfile]]
    #: scenario -> the modes measured, in the saved order
    modes: dict[str, list[str]]
    #: (scenario, mode) -> one row (metric -> value) per measured repeat
    measured: dict[tuple[str, str], list[dict[str, Any]]]
    #: the JSON document itself
    doc: dict[str, Any]

    def query(self, scenario: str) -> str | None:
        """The NexMark query of a scenario (`nexmark-q5` -> `q5`), None for a checkpoint_modes one."""
        return scenario.removeprefix(nexmark.PREFIX) if scenario.startswith(nexmark.PREFIX) else None


def load(path: str | Path) -> SavedRun:
    """Read a fidelity JSON (`benchmarks.fidelity --json`). Raises SavedRunError naming the file
    and what is missing."""
    where = str(path)
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SavedRunError(f"{where}: cannot read the saved fidelity run: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise SavedRunError(f"{where}: not JSON: {exc}") from exc
    for key in ("measure", "bench_profile", "profiles", "cells"):
        if key not in doc:
            raise SavedRunError(f"{where}: field {key!r} is missing (not a benchmarks.fidelity JSON?)")
    try:
        bench = cm.Profile(**{k: tuple(v) if isinstance(v, list) else v for k, v in doc["bench_profile"].items()})
        nexmark_bench = nexmark.Profile(**doc["nexmark_profile"]) if doc.get("nexmark_profile") else None
    except TypeError as exc:
        raise SavedRunError(f"{where}: field 'bench_profile' or 'nexmark_profile': {exc}") from exc
    try:
        profiles = {name: CostProfile.from_json(p, f"{where}: profiles.{name}") for name, p in doc["profiles"].items()}
        rounds = {name: [CostProfile.from_json(p, f"{where}: round_profiles.{name}[{i}]") for i, p in enumerate(ps)]
                  for name, ps in (doc.get("round_profiles") or {}).items()}
    except ProfileError as exc:
        raise SavedRunError(str(exc)) from exc
    modes: dict[str, list[str]] = {}
    measured: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cell in doc["cells"]:
        scenario, mode = cell["scenario"], cell["mode"]
        if scenario not in profiles:
            raise SavedRunError(f"{where}: cell of scenario {scenario!r} has no profile in 'profiles'")
        if scenario.startswith(nexmark.PREFIX) and nexmark_bench is None:
            raise SavedRunError(f"{where}: cell of {scenario!r} but no 'nexmark_profile'")
        if mode not in modes.setdefault(scenario, []):
            modes[scenario].append(mode)
        runs = measured.setdefault((scenario, mode), [])
        values = cell.get("measured_runs") or [cell.get("measured")]
        while len(runs) < len(values):
            runs.append({})
        for row, value in zip(runs, values):
            row[cell["metric"]] = value
    return SavedRun(path=where, measure=doc["measure"], quick=bool(doc.get("quick")), repeat=int(doc.get("repeat", 1)),
                    bench=bench, nexmark_bench=nexmark_bench,
                    profiles={name: p for name, p in profiles.items() if name in modes},
                    round_profiles={name: rounds.get(name) or [p] for name, p in profiles.items() if name in modes},
                    modes=modes,
                    measured=measured, doc=doc)
