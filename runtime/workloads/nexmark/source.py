"""NexMark as a barrierflow source: splits, checkpointed offsets, a rate or full speed.

Splits interleave stream positions: split j of n emits positions j, j+n, j+2n, ... (the
`GeneratorSource` rule), and position p is always the same event (`NexmarkGenerator`), so the
split count changes who emits an event, never the event set, and every split's `date_time` runs
at the configured rate (in order, or out of order by at most `config.max_out_of_orderness_ms`).
That is what a per-split bounded-out-of-orderness watermark needs: `events` attaches one to the
source (`event_time`), without changing a single event, and the queries keep it. A split's offset is the number of events it emitted; restoring
it regenerates the continuation exactly (nothing is kept but the offset).

Beam and Flink split the other way: each of n generators takes a contiguous block of event ids
on its own timeline (`GeneratorConfig.split`), so event times depend on the generator count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.sources import GeneratorSource
from operators.watermarks import WatermarkStrategy
from runtime.core.graph import JobGraphError
from runtime.workloads.nexmark.config import NexmarkConfig
from runtime.workloads.nexmark.generator import COLUMNS, NexmarkGenerator

if TYPE_CHECKING:
    from runtime.api.environment import DataStream, StreamEnvironment

__all__ = ["NexmarkSource", "event_time", "events"]

#: the field holding an event's time (ms since the epoch)
DATE_TIME = "date_time"
#: events a reader builds per call of the generator: building them with numpy costs about the same
#: per call for 10 events as for 1,000, and a task under load reads a few per step
READ_AHEAD = 1024


def event_time(max_out_of_orderness_ms: int = 0) -> WatermarkStrategy:
    """NexMark's event time: each event's `date_time`, watermarks `max_out_of_orderness_ms` behind
    the highest one per split (`NexmarkConfig.max_out_of_orderness_ms` for the generator's
    events; Flink SQL's `WATERMARK FOR date_time AS date_time - INTERVAL ...` on the source).
    A column assigner, so Arrow batches stay vectorised. The queries take a stream stamped so and
    never stamp it again: a tighter bound downstream would make events the source's bound allows
    late."""
    return WatermarkStrategy.for_bounded_out_of_orderness(max_out_of_orderness_ms).with_timestamp_assigner(DATE_TIME)


class NexmarkSource(GeneratorSource):
    """NexMark events (persons, auctions and bids in one stream) as records or Arrow batches.

    Args:
        config: the stream's parameters (`NexmarkConfig`; its seed decides every value).
        count: number of events, or None for an unbounded stream.
        splits: number of splits (>= 1).
        rate: events per second over all splits (wall clock), or None for full speed. With
            `rate=config.event_rate`, event time advances as fast as the clock.
        vectorised: hand out Arrow batches (`generator.EVENT_SCHEMA`, other kinds' columns null)
            instead of dicts of each event's own fields; the same events either way.
        name: the source name.
        timestamp_field: a field stamped with the (wall) time each event was read, for latency
            measurements; None (default) keeps the events deterministic.

    Raises:
        ValueError: an argument is out of range (named).
    """

    def __init__(self, config: NexmarkConfig | None = None, count: int | None = None, *, splits: int = 1,
                 rate: float | None = None, vectorised: bool = False, name: str = "nexmark",
                 timestamp_field: str | None = None) -> None:
        config = NexmarkConfig() if config is None else config
        if not isinstance(config, NexmarkConfig):
            raise ValueError(f"NexmarkSource: config must be a NexmarkConfig, got {type(config).__name__}")
        generator = NexmarkGenerator(config, count)
        try:
            super().__init__(count, rate, splits=splits, name=name, timestamp_field=timestamp_field,
                             batch_fn=generator.batch if vectorised else None,
                             rows_fn=None if vectorised else generator.records, read_ahead=READ_AHEAD)
        except ValueError as exc:
            raise ValueError(str(exc).replace("generate:", "NexmarkSource:", 1)) from None
        self.config = config
        self.vectorised = vectorised

    def columns(self) -> list[str]:
        return list(COLUMNS) + ([self.timestamp_field] if self.timestamp_field else [])

    def __repr__(self) -> str:
        return (f"NexmarkSource(count={self.count}, splits={self.num_splits}, rate={self.rate}, "
                f"vectorised={self.vectorised}, seed={self.config.seed})")


def events(env: StreamEnvironment, config: NexmarkConfig | None = None, count: int | None = None, *,
           splits: int | None = None, rate: float | None = None, vectorised: bool = False,
           name: str = "nexmark") -> DataStream:
    """The NexMark event stream of `config` in `env` (`splits` default: the environment's
    parallelism), with its event time (`event_time(config.max_out_of_orderness_ms)`).

    Raises:
        JobGraphError: an argument is out of range (named).
    """
    try:
        source = NexmarkSource(config, count, splits=env.parallelism if splits is None else splits, rate=rate,
                               vectorised=vectorised, name=name)
    except ValueError as exc:
        raise JobGraphError(str(exc)) from exc
    return env.from_source(source, watermark_strategy=event_time(source.config.max_out_of_orderness_ms))
