"""`OperatorChain`: the operators of one task, run one after the other (Flink's `OperatorChain`).

Data is a list of dicts or one Arrow batch (`operators.columns`); each operator gets the kind it
takes, converted only where the chain changes kind. Where records become Arrow — the input of a
sink or a vectorised operator — the stream is checked for one Arrow type per field first
(`runtime/records/record_types.py`). Time enters as *elements* (`push`): a watermark event goes
through the operators one by one — each emits what it fires (records, run through the operators
after it) and passes the watermark on, or not — and an operator's processing-time callback emits
into the operators after it (`on_processing_time`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from operators.base import OperatorContext, StreamOperator
from operators.columns import Batch, as_batch, num_rows
from operators.two_input import TwoInputStreamOperator
from runtime.records.messages import Watermark, WatermarkStatus
from runtime.records.record_types import StreamSchema

if TYPE_CHECKING:
    from runtime.core.graph import JobVertex

#: the operator-state key of a source task's split offsets (`{"offsets": [{"split", "position"}]}`)
SOURCE_OP_KEY = "source"


def operator_state_key(index: int, operator_name: str) -> str:
    """The key of the operator state of the chain's `index`-th operator in a task snapshot."""
    return f"{index}:{operator_name}"


def stream_name(producer: str | None, consumer: str | None) -> str:
    """How errors name a stream: by the operator that emitted it (by its consumer when it comes
    from the network)."""
    if producer is None:
        return f"records reaching operator {consumer!r}"
    return f"records emitted by operator {producer!r}"


def run_through(operators: Sequence[StreamOperator], data: Batch,
                input_types: Sequence[StreamSchema | None]) -> Batch:
    """Run `data` through `operators`, as records or as columns, whichever each one takes
    (converting only where the chain changes kind; see `operators.columns`). An operator whose
    input becomes Arrow has its input checked first (`input_types`, parallel to `operators`)."""
    for op, types in zip(operators, input_types):
        if not num_rows(data):
            break
        if types is not None:
            types.check(data)
        if isinstance(data, list):
            data = op.process_columns(as_batch(data, op.name, checked=True)) if op.prefers_columns \
                else op.process_batch(data)
        elif op.accepts_columns:
            data = op.process_columns(data)
        else:
            data = op.process_batch(data.to_pylist())
    return data


class OperatorChain:
    """The chained operators of a task's vertex, created from its factories and opened."""

    def __init__(self, vertex: JobVertex, context: OperatorContext) -> None:
        self.vertex = vertex
        self.context = context
        self.operators: list[StreamOperator] = [factory() for factory in vertex.operator_factories]
        for op in self.operators:
            op.open(context)
        # one Arrow type per field (runtime/records/record_types.py), checked where records become Arrow:
        # what an operator hands to a sink or a vectorised operator
        producers = ([f"Source: {vertex.source.name}"] if vertex.source is not None else [None]) + \
            [op.name for op in self.operators]
        self._input_types: list[StreamSchema | None] = [
            StreamSchema(stream_name(producers[index], op.name)) if op.stages_records or op.prefers_columns
            else None
            for index, op in enumerate(self.operators)
        ]
        #: how errors name what the chain emits (its last operator's output, or the source's)
        self.output_name = stream_name(producers[-1], None)
        #: the chain's head takes Arrow batches: hand it a buffer's batch, not its dicts
        self.columnar_input = not self.operators or self.operators[0].accepts_columns
        #: the chain's head has two logical inputs (`process` routes each buffer to its own)
        self.two_input = bool(self.operators) and isinstance(self.operators[0], TwoInputStreamOperator)
        self._index = {id(op): index for index, op in enumerate(self.operators)}

    def op_key(self, index: int) -> str:
        return operator_state_key(index, self.vertex.operator_names[index])

    def process(self, data: Batch, input_index: int = 0) -> Batch:
        """What the chain emits for `data`, input of logical input `input_index` of its head (a
        two-input operator's first or second: `operators.two_input`)."""
        if not self.two_input:
            return run_through(self.operators, data, self._input_types)
        if not num_rows(data):
            return data
        head = self.operators[0]
        records = data if isinstance(data, list) else data.to_pylist()
        data = head.process_batch2(records) if input_index else head.process_batch1(records)
        return run_through(self.operators[1:], data, self._input_types[1:])

    def push(self, start: int, elements: list[Any]) -> list[Any]:
        """`elements` — record lists and watermark events, in order — entering the chain's
        `start`-th operator (`len(operators)`: leaving it); returns what the chain emits, in order."""
        operators = self.operators
        out: list[Any] = []
        for element in elements:
            if not isinstance(element, Watermark | WatermarkStatus):
                if num_rows(element):
                    data = run_through(operators[start:], element, self._input_types[start:])
                    if num_rows(data):
                        out.append(data)
            elif start == len(operators):
                out.append(element)
            elif isinstance(element, Watermark):
                out += self.push(start + 1, operators[start].process_watermark(element))
            else:
                out += self.push(start + 1, operators[start].process_watermark_status(element))
        return out

    def on_processing_time(self, operator: StreamOperator, now: float) -> list[Any]:
        """`operator`'s processing-time callback: what it and the operators after it emit."""
        return self.push(self._index[id(operator)] + 1, operator.on_processing_time(now))

    @property
    def timer_services(self) -> list[Any]:
        """The timer services of the chain's operators (`operators.timer_service`)."""
        return self.context.timer_services

    def end_input(self) -> Iterator[Batch]:
        """End every operator's input, head first; yields what each emits through the rest."""
        for index, op in enumerate(self.operators):
            yield run_through(self.operators[index + 1:], op.end_input(), self._input_types[index + 1:])

    def snapshot_state(self, checkpoint_id: int) -> dict[str, dict[str, list[Any]]]:
        """Operator state by `op_key`, for operators that have some."""
        states = {}
        for index, op in enumerate(self.operators):
            op_state = op.snapshot_state(checkpoint_id)
            if op_state:
                states[self.op_key(index)] = op_state
        return states

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        for op in self.operators:
            op.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        for op in self.operators:
            op.notify_checkpoint_aborted(checkpoint_id)

    def close(self) -> None:
        for op in self.operators:
            op.close()
