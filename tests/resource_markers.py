"""Which marker a test needs for the real component it starts, and the tiers built on them.

A test that takes the fixture of a real component (Ray, Spark, ZooKeeper, moto's S3 server) must
carry that component's marker, so `-m "not ray"` never starts Ray; every such test is also `slow`,
so `-m "not slow"` (`scripts/test.sh --fast`) runs only what needs no server.

The full run has two tiers: the tests that need the whole machine (`serial`: every test of a real
component, and the ones marked `serial` by hand: a real Flink, a measurement of a child process's
CPU) run one at a time after the others have run on both cores (`pytest -n 2`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

#: fixture -> the marker a test using it (directly or through another fixture) must carry
RESOURCE_FIXTURES = {"ray_session": "ray", "spark": "spark", "zk_server": "zookeeper", "s3_server": "s3"}
#: markers of tests that start a real component: each of them is also `slow` and `serial`
RESOURCE_MARKERS = frozenset(RESOURCE_FIXTURES.values())
#: a test marked so runs alone, after the parallel tier
SERIAL = "serial"


class Item(Protocol):
    nodeid: str
    fixturenames: list[str]

    def iter_markers(self, name: str | None = None) -> Iterable: ...


def marker_names(item: Item) -> set[str]:
    return {mark.name for mark in item.iter_markers()}


def unmarked_resource_uses(items: Iterable[Item]) -> list[str]:
    """One line per test that uses a component's fixture without that component's marker."""
    return [f"{item.nodeid} uses the fixture {fixture} but is not marked @pytest.mark.{marker}"
            for item in items
            for fixture, marker in RESOURCE_FIXTURES.items()
            if fixture in getattr(item, "fixturenames", ()) and marker not in marker_names(item)]


def needs_slow(item: Item) -> bool:
    """Whether the test starts a real component (and so belongs to the slow tier)."""
    return bool(marker_names(item) & RESOURCE_MARKERS)


def needs_serial(item: Item) -> bool:
    """Whether the test must run alone (a real component, or marked `serial`), not beside another
    pytest worker."""
    names = marker_names(item)
    return bool(names & RESOURCE_MARKERS) or SERIAL in names
