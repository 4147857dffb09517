"""The storage-tool swarm (`runtime.verify.storage_swarm`) in CI: a fixed set of seeds, each a
checkpoint directory put through failing runs (some before their first checkpoint) and restores,
links out of and into it, torn and temporary files, dead and live leases, and gc (dry and real) at
random moments — and the checker catching each planted bug. Longer: `python -m runtime.verify.storage_swarm --minutes M`."""

from __future__ import annotations

import pytest

from checkpoint.io import tools
from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.io.lease import JobLease
from checkpoint.lease import LeaseVerdict
from runtime.verify import storage_swarm
from runtime.verify.storage_swarm import draw, run_seed

#: the CI sweep: every hostile kind, both sinks, gc during runs and a second run attempted
SEEDS = range(1, 21)
#: seeds that found a bug once: 1039, a SparkSink transaction written twice by two executions
#: restoring the same checkpoint (files were named per committer)
REGRESSIONS = (1039,)


def test_the_drawn_histories_cover_every_hostile_kind_and_both_sinks() -> None:
    configs = [draw(seed) for seed in SEEDS]
    assert {kind for c in configs for gap in c.hostile for kind in gap} == set(storage_swarm.HOSTILE)
    assert {c.spark_sink for c in configs} == {False, True}
    assert {c.backend for c in configs} == set(storage_swarm.BACKENDS)
    assert any(c.gc_during[0] for c in configs) and any(any(c.concurrent) for c in configs)
    assert any(any(c.early) for c in configs)  # a run that fails before its first checkpoint began
    assert draw(7) == draw(7)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [*SEEDS, *REGRESSIONS])
def test_a_seed_breaks_no_storage_guarantee(seed: int) -> None:
    verdict = run_seed(seed)
    assert verdict.ok, f"{verdict.summary()}\n{verdict.config}\nreplay: {verdict.replay}"


def test_a_listing_that_follows_links_is_caught(monkeypatch) -> None:
    assert run_seed(1).ok
    monkeypatch.setattr(FsBlobStore, "_local", property(lambda self: False))  # pyarrow's listing: follows links
    verdict = run_seed(1)
    assert not verdict.ok and "files outside changed" in verdict.problem, verdict.summary()


def test_a_gc_that_ignores_the_lease_is_caught(monkeypatch) -> None:
    class Ignored(JobLease):
        def verdict(self):
            return LeaseVerdict.FREE, None

        def acquire(self) -> None:
            pass

    monkeypatch.setattr(tools, "JobLease", Ignored)
    verdict = run_seed(2)
    assert not verdict.ok and "ran on a directory live run" in verdict.problem, verdict.summary()


def test_a_gc_that_removes_a_committer_a_restore_needs_is_caught(monkeypatch) -> None:
    def everything(storage, job_id, newest_valid):
        return storage.blob_store.list(f"{storage.job_dir(job_id)}/committed/")

    monkeypatch.setattr(tools, "unneeded_files", everything)
    verdict = run_seed(1)
    assert not verdict.ok, verdict.summary()
