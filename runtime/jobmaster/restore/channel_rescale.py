"""Redistributing the in-flight data of an unaligned checkpoint to a job of another parallelism.

Theory of operation
-------------------
An unaligned checkpoint persists, per task, the buffers its barrier overtook: *input channel
state* (buffers received but not processed) and *output channel state* (buffers produced but not
sent). Both belong to one channel `(edge, sender subtask, receiver subtask)` of the parallelism
the checkpoint was taken at. When that parallelism changes (`redistribute_channel_state`), every
persisted record must reach exactly one new subtask, and the right one:

* The in-flight data of an old channel is its receiver's input state followed by its sender's
  output state (the sender's buffers were produced after everything the receiver holds). Both go
  to the *receiving* side: they become input channel state of a new subtask of the receiving
  vertex, replayed before any new input. Flink instead restores output buffers at a new upstream
  subtask and lets the receivers filter the "ambiguous" records of the key-group ranges they share
  (`StateAssignmentOperation`, `SubtaskStateMapper`, `InflightDataRescalingDescriptor`); here the
  records are at hand, so they are routed once, at restore, with no ambiguity left to filter. It
  also keeps each (source split, key) in order when a split moves to another source subtask: its
  old in-flight records are replayed downstream before anything re-read from the split arrives.
* Which new receiver, by the edge's partitioner:

  - `hash` (key groups): the new subtask owning the record's key group (Flink's RANGE mapper),
    record by record. Exactly-once and per-key order hold.
  - `forward`, `rebalance`: records of old receiver `d` go to new receiver `d % p`. The receiving
    operator is not keyed by this edge (keyed operators sit behind a `hash` edge), so any one
    subtask is correct; order across the rescale is not kept (a rebalance never keeps it, a
    forward edge loses it like a rebalance would; Flink maps both round robin).
  - `broadcast`: every receiver holds its own copy at its own progress; a receiver can keep its
    copy only if the receiving vertex keeps its parallelism. A changed one is refused
    (`ChannelRescaleError`, naming operator and partitioner): a new receiver would need the records
    every old receiver had already processed, and those are gone. (Flink maps it round robin.)

  A union is several input edges; each is redistributed by its own partitioner. There is no
  `rescale` partitioner in this project.
* Which input channel: the new channel of the same edge from upstream subtask `u % p_up` (forward:
  the receiver's only channel of the edge), so a later checkpoint persists it as state of that edge.

Channel numbering of the old parallelism is `runtime.core.graph`'s, computed with the checkpoint's
parallelism per vertex (the job's edges must be the checkpoint's, as for every restore; an edge
whose exchange the API chose, `JobEdge.follows_parallelism`, was forward exactly when its two
vertices had equal parallelism).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from runtime.core.partitioners import KeyGroupHash
from runtime.jobmaster.restore.match import RestoreError
from runtime.records.messages import Buffer
from state.key_groups import key_group_for, subtask_for_key_group

if TYPE_CHECKING:
    from runtime.core.graph import JobEdge, JobGraph

__all__ = ["ChannelRescaleError", "ChannelState", "redistribute_channel_state"]

#: one vertex's channel state: subtask -> (input channel -> buffers, output channel -> buffers)
ChannelState = dict[int, tuple[dict[int, list[Buffer]], dict[int, list[Buffer]]]]


class ChannelRescaleError(RestoreError):
    """In-flight data of an unaligned checkpoint cannot be redistributed exactly once (names the
    operators and the partitioner)."""


def redistribute_channel_state(graph: JobGraph, old_parallelism: Mapping[str, int],
                               state: Mapping[str, ChannelState], checkpoint_id: int = 0
                               ) -> dict[str, ChannelState]:
    """The channel state of every vertex of `graph` (at its parallelism) from `state`, taken at
    `old_parallelism` (vertex -> subtasks; a vertex not in it kept its parallelism).

    Returns:
        vertex -> new subtask -> (input channel state, {}): output state moved to the receivers.

    Raises:
        ChannelRescaleError: a broadcast edge with in-flight data into a vertex whose parallelism changed.
    """
    old = {v.name: old_parallelism.get(v.name, v.parallelism) for v in graph.vertices}
    new = {v.name: v.parallelism for v in graph.vertices}
    # in-flight data per old channel (edge index, sender, receiver): receiver's input state first
    in_flight: dict[tuple[int, int, int], list[Buffer]] = {}
    edge_index = {id(edge): i for i, edge in enumerate(graph.edges)}
    for vertex in graph.vertices:
        for subtask, (inputs, _) in sorted(state.get(vertex.name, {}).items()):
            layout = _input_layout(graph, vertex.name, subtask, old)
            for channel, buffers in sorted(inputs.items()):
                edge, sender = _channel(layout, channel, vertex.name, subtask, "input")
                in_flight.setdefault((edge_index[id(edge)], sender, subtask), []).extend(buffers)
    for vertex in graph.vertices:
        for subtask, (_, outputs) in sorted(state.get(vertex.name, {}).items()):
            layout = _output_layout(graph, vertex.name, subtask, old)
            for channel, buffers in sorted(outputs.items()):
                edge, receiver = _channel(layout, channel, vertex.name, subtask, "output")
                in_flight.setdefault((edge_index[id(edge)], subtask, receiver), []).extend(buffers)

    out: dict[str, ChannelState] = {}
    new_layouts: dict[tuple[str, int], dict[tuple[int, int], int]] = {}
    for (index, sender, receiver), buffers in sorted(in_flight.items(), key=lambda item: item[0]):
        edge = graph.edges[index]
        for target, buffer in _route(edge, receiver, buffers, old, new, checkpoint_id):
            key = (edge.target, target)
            if key not in new_layouts:
                layout = _input_layout(graph, edge.target, target, new)
                new_layouts[key] = {(edge_index[id(e)], u): ch for ch, (e, u) in enumerate(layout)}
            upstream = target if edge.is_forward else sender % new[edge.source]
            channel = new_layouts[key][(index, upstream)]
            inputs, _ = out.setdefault(edge.target, {}).setdefault(target, ({}, {}))
            inputs.setdefault(channel, []).append(buffer)
    return out


def _route(edge: JobEdge, receiver: int, buffers: list[Buffer], old: Mapping[str, int],
           new: Mapping[str, int], checkpoint_id: int) -> list[tuple[int, Buffer]]:
    """(new receiver, buffer) for each piece of the in-flight `buffers` of old `receiver`.
    Watermark events in flight are dropped: the new receivers wait for a watermark from every
    input anyway, and a watermark only ever holds event time back until the next one comes."""
    parallelism = new[edge.target]
    spec = edge.partitioner
    buffers = [b for b in buffers if isinstance(b, Buffer)]
    if isinstance(spec, KeyGroupHash):
        routed = []
        for buffer in buffers:
            routed += _split_by_key_group(spec, buffer, parallelism)
        return routed
    if spec.kind == "broadcast" and old[edge.target] != parallelism:
        raise ChannelRescaleError(
            f"checkpoint {checkpoint_id} holds in-flight records of the broadcast edge {edge.source!r} -> "
            f"{edge.target!r}, and operator {edge.target!r} changes parallelism from {old[edge.target]} to "
            f"{parallelism}: every receiver of a broadcast holds its own copy at its own progress, so a "
            "new receiver cannot get exactly the records it misses. Restore at parallelism "
            f"{old[edge.target]} or from an aligned checkpoint or savepoint"
        )
    return [(receiver % parallelism, buffer) for buffer in buffers]


def _split_by_key_group(spec: KeyGroupHash, buffer: Buffer, parallelism: int) -> list[tuple[int, Buffer]]:
    """The rows of `buffer` per new subtask owning their key group, order kept."""
    owners = [subtask_for_key_group(spec.max_parallelism, parallelism,
                                    key_group_for(spec.key_selector(record), spec.max_parallelism))
              for record in buffer.to_records()]
    if len(set(owners)) <= 1:
        return [(owners[0], buffer)] if owners else []
    rows: dict[int, list[int]] = {}
    for row, owner in enumerate(owners):
        rows.setdefault(owner, []).append(row)
    return [(owner, Buffer.of(buffer.batch.take(pa.array(indices, pa.int64()))))
            for owner, indices in sorted(rows.items())]


def _input_layout(graph: JobGraph, vertex: str, subtask: int, parallelism: Mapping[str, int]
                  ) -> list[tuple[JobEdge, int]]:
    """`(edge, upstream subtask)` per input channel, as `JobGraph.input_channels` numbers them,
    at `parallelism`."""
    channels: list[tuple[JobEdge, int]] = []
    for edge in graph.inputs_of(vertex):
        if _forward_at(edge, parallelism):
            channels.append((edge, subtask))
        else:
            channels.extend((edge, u) for u in range(parallelism[edge.source]))
    return channels


def _output_layout(graph: JobGraph, vertex: str, subtask: int, parallelism: Mapping[str, int]
                   ) -> list[tuple[JobEdge, int]]:
    """`(edge, downstream subtask)` per output channel, as `JobGraph.output_channels` numbers
    them, at `parallelism`."""
    channels: list[tuple[JobEdge, int]] = []
    for edge in graph.outputs_of(vertex):
        if _forward_at(edge, parallelism):
            channels.append((edge, subtask))
        else:
            channels.extend((edge, d) for d in range(parallelism[edge.target]))
    return channels


def _forward_at(edge: JobEdge, parallelism: Mapping[str, int]) -> bool:
    """Whether `edge` is forward at `parallelism` (one the API chose follows it)."""
    if edge.follows_parallelism:
        return parallelism[edge.source] == parallelism[edge.target]
    return edge.is_forward


def _channel(layout: list[tuple[JobEdge, int]], channel: int, vertex: str, subtask: int,
             kind: str) -> tuple[JobEdge, int]:
    if not 0 <= channel < len(layout):
        raise RestoreError(
            f"operator {vertex!r} subtask {subtask} holds {kind} channel state of channel {channel}, but "
            f"it had {len(layout)} {kind} channels at the checkpoint's parallelism (the job's edges "
            "differ from the checkpoint's)"
        )
    return layout[channel]
