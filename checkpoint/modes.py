"""Checkpoint-mode names: the one place a name such as `"unaligned"` or `"at-least-once"` becomes
checkpoint settings, for the API, the CLI, the benchmarks, and swarm and VOPR runs.

A name stands for a guarantee (`CheckpointingMode`) plus how barriers travel: `aligned`,
`unaligned`, `aligned-timeout` (aligned, switching to unaligned after an alignment timeout),
`at-least-once`; `exactly-once` is the guarantee alone (aligned unless told otherwise), `none`
takes no checkpoints, and the `-debloat` names add buffer debloating. Older spellings users type
today are accepted too (`ALIASES`: `at_least_once`, `timeout`, ...). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from vocabulary.options import CheckpointingMode, InvalidOptionError

__all__ = ["ALIASES", "MODE_NAMES", "ModeProfile", "parse_mode"]


@dataclass(frozen=True)
class ModeProfile:
    """What a checkpoint-mode name configures."""

    name: str
    #: the guarantee; None: no checkpoints
    mode: CheckpointingMode | None
    unaligned: bool = False
    #: aligned with an alignment timeout (its length comes from elsewhere)
    alignment_timeout: bool = False
    debloat: bool = False

    @property
    def enabled(self) -> bool:
        return self.mode is not None

    @property
    def exactly_once(self) -> bool:
        return self.mode is CheckpointingMode.EXACTLY_ONCE

    def checkpointing(self, alignment_timeout: float | None = None) -> dict[str, Any]:
        """The `enable_checkpointing` keywords of this mode (`mode`, `unaligned`, `alignment_timeout`);
        `alignment_timeout` is used by `aligned-timeout` only, which needs it."""
        if self.mode is None:
            raise InvalidOptionError("mode", self.name, "takes no checkpoints: do not enable checkpointing")
        if self.alignment_timeout and alignment_timeout is None:
            raise InvalidOptionError("alignment_timeout", None, f"mode {self.name!r} needs one, in seconds")
        return {"mode": self.mode, "unaligned": self.unaligned,
                "alignment_timeout": alignment_timeout if self.alignment_timeout else None}


_EXACTLY_ONCE, _AT_LEAST_ONCE = CheckpointingMode.EXACTLY_ONCE, CheckpointingMode.AT_LEAST_ONCE
_PROFILES = (
    ModeProfile("none", None),
    ModeProfile("exactly-once", _EXACTLY_ONCE),
    ModeProfile("aligned", _EXACTLY_ONCE),
    ModeProfile("unaligned", _EXACTLY_ONCE, unaligned=True),
    ModeProfile("aligned-timeout", _EXACTLY_ONCE, alignment_timeout=True),
    ModeProfile("at-least-once", _AT_LEAST_ONCE),
    ModeProfile("aligned-debloat", _EXACTLY_ONCE, debloat=True),
    ModeProfile("unaligned-debloat", _EXACTLY_ONCE, unaligned=True, debloat=True),
)
#: every mode name, canonical spelling
MODE_NAMES: tuple[str, ...] = tuple(p.name for p in _PROFILES)
_BY_NAME = {p.name: p for p in _PROFILES}
#: other spellings in use -> canonical name (`CheckpointingMode` values and swarm/VOPR's names)
ALIASES = {"exactly_once": "exactly-once", "at_least_once": "at-least-once", "timeout": "aligned-timeout"}


def _listing(names: Collection[str]) -> str:
    spelled = {canonical: alias for alias, canonical in ALIASES.items()}
    return ", ".join(f"{n} (or {spelled[n]})" if n in spelled else n for n in names)


def parse_mode(name: str | CheckpointingMode, *, accepted: Collection[str] = MODE_NAMES,
               option: str = "mode") -> ModeProfile:
    """The profile of checkpoint-mode `name` (any case; an alias or a `CheckpointingMode` too).

    Args:
        accepted: the canonical names this caller takes (default: all); the error lists them.
        option: the option or flag named in the error.

    Raises:
        InvalidOptionError: not one of `accepted`, naming the option, the value and the accepted names.
    """
    if isinstance(name, CheckpointingMode):
        key = name.value
    elif isinstance(name, str):
        key = name.strip().lower()
    else:
        key = None
    if key is not None:
        key = ALIASES.get(key, key)
        if key in accepted and key in _BY_NAME:
            return _BY_NAME[key]
    raise InvalidOptionError(option, name, f"must be one of {_listing([n for n in MODE_NAMES if n in accepted])}")
