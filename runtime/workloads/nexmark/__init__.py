"""NexMark, the auction benchmark (persons, auctions, bids), on barrierflow.

- `NexmarkConfig`: the stream's parameters (seed, rate, proportions, hot-key ratios...);
  `config.py` has the formulas for ids, foreign keys and times (Beam's and Flink's nexmark).
- `NexmarkSource` / `events(env, config, count)`: the events as a source, records or Arrow batches
  (`generator.py`: what each field holds; `source.py`: splits and offsets), stamped with their
  event time (`event_time(bound)`: `date_time`, watermarks the generator's out-of-order bound
  behind, per split; give it to any other source of the events, e.g. `env.from_parquet`).
- `dataset.write_events` / `python -m runtime.workloads.nexmark --events N --out DIR`: the same
  events as Parquet files (`env.from_parquet(DIR)` reads them back).
- `q0` .. `q5`, `q7`, `q8`, `q9`, `q11`, `q12`: the queries, one module each, over the events
  with their event time (a query never stamps them again); `queries.QUERIES`
  lists them with their Spark SQL for the oracle (`oracle.py`; q12, processing time, has none).
"""

from runtime.workloads.nexmark.config import NexmarkConfig
from runtime.workloads.nexmark.source import NexmarkSource, event_time, events

__all__ = ["NexmarkConfig", "NexmarkSource", "event_time", "events"]
