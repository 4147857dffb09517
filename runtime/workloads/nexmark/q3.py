"""NexMark Q3, local item suggestion: who sells category-10 items in Oregon, Idaho or California
(the `nexmark` repo's q3.sql, `SQL`: a regular join of auctions with their sellers).

Persons and auctions come in one stream, so the join is one keyed function, keyed by the seller:
a person is kept for ever (later auctions of theirs join it), an auction only until its seller
arrives (a seller's id may lie a few persons ahead). Each matching pair is emitted once, whichever
came first: the SQL join's rows, as a multiset. State grows with the persons.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from operators import KeyedProcessFunction
from runtime.api.environment import DataStream

SQL = """
SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
"""
STATES = ("OR", "ID", "CA")
CATEGORY = 10


def join_side(e: dict[str, Any]) -> list[dict[str, Any]]:
    """A person of those states or an auction of the category, keyed by the seller's id; else nothing."""
    if e["kind"] == "person" and e["state"] in STATES:
        return [{"kind": "person", "seller": e["id"], "name": e["name"], "city": e["city"], "state": e["state"]}]
    if e["kind"] == "auction" and e["category"] == CATEGORY:
        return [{"kind": "auction", "seller": e["seller"], "id": e["id"]}]
    return []


class LocalItemSuggestion(KeyedProcessFunction):
    def process_element(self, record: dict[str, Any], ctx: Any) -> Iterator[dict[str, Any]]:
        person = ctx.value_state("person")
        waiting = ctx.list_state("auctions")
        if record["kind"] == "person":  # the seller (a field another kind lacks arrives as None, not absent)
            person.update({"name": record["name"], "city": record["city"], "state": record["state"]})
            for auction in waiting.get():
                yield {**person.value(), "id": auction}
            waiting.clear()
        elif person.value() is not None:
            yield {**person.value(), "id": record["id"]}
        else:
            waiting.add(record["id"])


def build(events: DataStream) -> DataStream:
    return (events.flat_map(join_side, name="q3-sides")
            .key_by("seller").process(LocalItemSuggestion(), name="q3"))
