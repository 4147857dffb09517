"""`CompletionNotices`: which tasks are notified of a completion directly, what a source is owed."""

from __future__ import annotations

from operators import CollectSink
from runtime import StreamEnvironment
from runtime.jobmaster.coordination.completions import CompletionNotices
from vocabulary.options import CheckpointingMode


class _ListeningSink(CollectSink):
    """A sink acting on every completion itself (overrides `notify_checkpoint_complete`)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        super().notify_checkpoint_complete(checkpoint_id)


def _graph(sink: CollectSink | None = None):
    env = StreamEnvironment(parallelism=2).disable_chaining()
    env.enable_checkpointing(interval=0.1, mode=CheckpointingMode.EXACTLY_ONCE)
    env.from_collection([{"a": 1}], splits=2).map(lambda r: r, name="to-app").sink_to(sink or _ListeningSink("pv"))
    return env.get_job_graph("route")


def _tasks(graph):
    return (next(t for t in graph.task_ids() if t.vertex.startswith(p)) for p in ("Source", "to-app", "Sink"))


def test_a_collect_sink_learns_of_completions_from_barriers() -> None:
    # the global committer commits its transactions: it only forgets pending ids, which can wait
    graph = _graph(CollectSink("pv"))
    notices = CompletionNotices(graph)
    _, _, sink = _tasks(graph)
    assert not notices.is_direct(sink, final=False) and notices.is_direct(sink, final=True)


def test_completion_notices_route_and_keep_the_newest_for_a_source() -> None:
    graph = _graph()
    notices = CompletionNotices(graph)
    source, mid, sink = _tasks(graph)
    assert notices.is_direct(sink, final=False) and notices.is_direct(mid, final=True)
    assert not notices.is_direct(source, final=False) and not notices.is_direct(mid, final=False)
    for checkpoint_id in (3, 5, 4):  # a late, older one does not win
        notices.owe(source, checkpoint_id)
    notices.owe(mid, 6)  # no source: it takes it from a barrier
    assert notices.take(source) == 5 and notices.take(source) is None and notices.take(mid) is None
    notices.owe(source, 7)
    assert notices.is_direct(source, final=True) and notices.take(source) is None, "the final one subsumes it"
    notices.owe(source, 8)
    notices.clear()
    assert notices.take(source) is None
