"""`RemoteCommitter` with a sender thread: commits leave the caller's thread, `drain` still waits."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from runtime.ray.services import CommitterService, RemoteCommitter


def test_drain_waits_for_commits_still_queued_on_the_sender_thread(ray_session) -> None:
    service = ray_session.remote(num_cpus=0)(CommitterService).remote()
    sender = ThreadPoolExecutor(1)
    committer = RemoteCommitter(service, sender=sender)
    try:
        committer.stage("pv", "pv-1", [{"i": 1}, {"i": 2}])
        queued, sent = committer.take_staged()
        ray_session.get(committer.send(queued) + sent)

        release = threading.Event()
        sender.submit(release.wait)  # the sender is busy: the commit below waits behind it
        committer.commit("pv", "pv-1")
        drained = threading.Event()
        drainer = threading.Thread(target=lambda: (committer.drain(), drained.set()))
        drainer.start()
        assert not drained.wait(0.3), "drain returned before the commit was even submitted"
        release.set()
        assert drained.wait(30), "drain did not return after the sender went on"
        assert ray_session.get(service.committer.remote()).output("pv") == [{"i": 1}, {"i": 2}]
    finally:
        release.set()
        sender.shutdown()
        ray_session.kill(service)


def test_a_commit_after_stages_still_queued_sends_them_first(ray_session) -> None:
    service = ray_session.remote(num_cpus=0)(CommitterService).remote()
    sender = ThreadPoolExecutor(1)
    committer = RemoteCommitter(service, sender=sender)
    try:
        # no snapshot took the stage (checkpointing off: the end of input stages and commits)
        committer.stage("pv", "pv-7", [{"i": 7}])
        committer.commit("pv", "pv-7")
        committer.drain()
        assert ray_session.get(service.committer.remote()).output("pv") == [{"i": 7}]
    finally:
        sender.shutdown()
        ray_session.kill(service)
