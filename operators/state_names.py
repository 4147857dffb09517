"""Which keyed state a `KeyedProcessFunction` uses, known before it runs.

A restore checks the checkpoint's keyed state names against the names the job's operators use
(`runtime.jobmaster.restore.match`), before any task starts. Keyed state is created lazily, on the first
`ctx.value_state(name)` in `process_element`, so the names are not known from running the job
up front; they are read from the function's code instead:

* `state_names` on the function (a class or instance attribute, a collection of str) declares
  them outright; nothing is read from the code then.
* Otherwise the bytecode of every method of the function's class (and of its own base classes,
  nested functions and lambdas included) is scanned for calls of `value_state`, `list_state` or
  `map_state` whose first argument is a string literal. A call with a computed name makes the
  set incomplete: ``DeclaredState.computed`` lists where, and the restore check asks for a
  `state_names` declaration when the checkpoint holds a name the literals do not cover.

State reached only through code outside the class (a module-level helper taking `ctx`) is not
seen either; a restore then reports that state as unused, naming it, and a `state_names`
declaration fixes that.
"""

from __future__ import annotations

import dis
from collections.abc import Iterator
from functools import lru_cache
from types import CodeType
from typing import Any

from operators.base import DeclaredState

#: the `KeyedContext` methods that name a keyed state
_ACCESSORS = frozenset({"value_state", "list_state", "map_state"})


def declared_state_names(fn: Any) -> frozenset[str] | None:
    """`fn.state_names` as a frozenset, or None when not declared.

    Raises:
        TypeError: `state_names` is not a collection of non-empty strings (names the class).
    """
    declared = getattr(fn, "state_names", None)
    if declared is None:
        return None
    try:
        names = frozenset(declared)
    except TypeError:
        names = frozenset([None])
    if isinstance(declared, str | bytes) or not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"{type(fn).__name__}.state_names must be a collection of non-empty str (the keyed "
                        f"state names the function uses), got {declared!r}")
    return names


def keyed_state_use(fn: Any, base: type) -> DeclaredState:
    """The keyed state `fn` uses: its `state_names`, else the literals its class's code names.

    Args:
        fn: a `KeyedProcessFunction` instance.
        base: `KeyedProcessFunction` (its methods, and those of its bases, are not scanned).

    Raises:
        TypeError: `fn.state_names` is malformed.
    """
    declared = declared_state_names(fn)
    if declared is not None:
        return DeclaredState(keyed=declared)
    return _scan_class(type(fn), base)


@lru_cache(maxsize=256)
def _scan_class(cls: type, base: type) -> DeclaredState:
    skip = set(base.__mro__)
    names: set[str] = set()
    computed: list[str] = []
    for klass in cls.__mro__:
        if klass in skip:
            continue
        for attr in vars(klass).values():
            for code in _codes(attr):
                _scan_code(code, names, computed)
    return DeclaredState(keyed=frozenset(names), computed=tuple(computed))


def _codes(attr: Any) -> Iterator[CodeType]:
    if isinstance(attr, staticmethod | classmethod):
        attr = attr.__func__
    if isinstance(attr, property):
        for part in (attr.fget, attr.fset, attr.fdel):
            yield from _codes(part)
        return
    code = getattr(attr, "__code__", None)
    if isinstance(code, CodeType):
        yield code


def _scan_code(code: CodeType, names: set[str], computed: list[str]) -> None:
    instructions = list(dis.get_instructions(code))
    for i, ins in enumerate(instructions):
        if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in _ACCESSORS:
            following = instructions[i + 1] if i + 1 < len(instructions) else None
            if following is not None and following.opname == "LOAD_CONST" and isinstance(following.argval, str):
                names.add(following.argval)
            else:
                line = ins.positions.lineno if ins.positions is not None else None
                computed.append(f"{code.co_qualname} line {line}")
    for const in code.co_consts:
        if isinstance(const, CodeType):
            _scan_code(const, names, computed)
