"""`TwoInputStreamOperator`: an operator fed by two logical inputs (Flink's `TwoInputStreamOperator`).

Theory of operation
-------------------
A two-input operator (a connected stream's co-function, an interval join) heads its task's chain:
the job graph gives each of its input edges an `input_index` (0 for the first input, 1 for the
second), the task knows the logical input of each of its channels (`JobGraph.channel_inputs`)
and hands every input buffer to `process_batch1` or `process_batch2` accordingly
(`OperatorChain.process`). Everything else is shared by both inputs, as in Flink:

* one input gate over the channels of both inputs, so one barrier handler aligns (or overtakes,
  or tracks) a checkpoint's barriers across both: while aligning, a side whose barrier arrived is
  blocked until the other side's arrives;
* one watermark: each input's channels are combined by their own `StatusWatermarkValve`, and
  the operator gets the minimum of both inputs' (an idle input left out: `CombinedWatermark`),
  through `process_watermark` like any operator;
* one keyed state backend and one timer service for a keyed operator (both inputs are hash
  partitioned into the same key groups by their own key selectors).

Pure: no I/O.
"""

from __future__ import annotations

import abc

from operators.base import OperatorError, Record, StreamOperator

__all__ = ["TwoInputStreamOperator"]


class TwoInputStreamOperator(StreamOperator):
    """An operator with two logical inputs; it is always the head of its task's chain."""

    @abc.abstractmethod
    def process_batch1(self, records: list[Record]) -> list[Record]:
        """One buffer of the first input: the output records, in order."""

    @abc.abstractmethod
    def process_batch2(self, records: list[Record]) -> list[Record]:
        """One buffer of the second input: the output records, in order."""

    def process_batch(self, records: list[Record]) -> list[Record]:
        raise TypeError(f"operator {self.name!r} has two inputs: its task calls process_batch1/process_batch2")

    def close(self) -> None:
        """Close the user function (`self.fn`), naming the operator if that fails."""
        fn = getattr(self, "fn", None)
        if fn is None:
            return
        try:
            fn.close()
        except Exception as exc:
            raise OperatorError(self.name, None, exc) from exc
