"""The floors in pyproject.toml exclude releases with a known vulnerability of a kind barrierflow is
exposed to, for the build backend as for the run-time dependencies."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

#: package -> the first release with every known fix (and the advisory that set it)
FIXED_IN = {
    "setuptools": ("83.0.0", "CVE-2026-59890"),
    "pyarrow": ("14.0.1", "CVE-2023-47248"),
    "ray": ("2.54", "CVE-2026-27482"),
    "pyspark": ("3.5.2", "CVE-2025-55039"),
}


def floors() -> dict[str, Version]:
    project = tomllib.loads(PYPROJECT.read_text())
    found = {}
    for requirement in [*project["build-system"]["requires"], *project["project"]["dependencies"]]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9.]+)", requirement.strip())
        assert match, f"{requirement!r} has no '>=' floor"
        found[match.group(1).lower()] = Version(match.group(2))
    return found


def test_every_floor_excludes_the_releases_with_known_vulnerabilities() -> None:
    found = floors()
    for package, (fixed, advisory) in FIXED_IN.items():
        assert package in found, f"{package} has no floor in {PYPROJECT}"
        assert found[package] >= Version(fixed), f"{package}>={found[package]} admits releases with {advisory}"
