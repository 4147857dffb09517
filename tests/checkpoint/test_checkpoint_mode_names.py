"""checkpoint/modes.py: one parser of checkpoint-mode names, used by the API, CLI, benchmarks, swarm
and VOPR (both spellings users type today are accepted; one error lists the accepted names)."""

from __future__ import annotations

import pytest

from checkpoint.modes import ALIASES, MODE_NAMES, parse_mode
from runtime.api.environment import StreamEnvironment
from runtime.cli import build_parser
from runtime.verify import vopr
from vocabulary.options import CheckpointingMode, InvalidOptionError

EO, ALO = CheckpointingMode.EXACTLY_ONCE, CheckpointingMode.AT_LEAST_ONCE


@pytest.mark.parametrize(("name", "mode", "unaligned", "timeout", "debloat"), [
    ("none", None, False, False, False),
    ("exactly-once", EO, False, False, False),
    ("aligned", EO, False, False, False),
    ("unaligned", EO, True, False, False),
    ("aligned-timeout", EO, False, True, False),
    ("at-least-once", ALO, False, False, False),
    ("aligned-debloat", EO, False, False, True),
    ("unaligned-debloat", EO, True, False, True),
])
def test_every_name_says_what_it_configures(name: str, mode, unaligned: bool, timeout: bool, debloat: bool) -> None:
    profile = parse_mode(name)
    assert (profile.name, profile.mode, profile.unaligned, profile.alignment_timeout, profile.debloat) == (
        name, mode, unaligned, timeout, debloat)


@pytest.mark.parametrize(("alias", "canonical"), sorted(ALIASES.items()))
def test_aliases_and_enum_and_case_name_the_same_mode(alias: str, canonical: str) -> None:
    assert parse_mode(alias) is parse_mode(canonical) is parse_mode(f" {alias.upper()} ")
    assert parse_mode(ALO).name == "at-least-once" and parse_mode(EO).name == "exactly-once"
    assert set(ALIASES.values()) <= set(MODE_NAMES)


def test_the_error_names_the_option_value_and_accepted_names() -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse_mode("alinged", accepted=("aligned", "aligned-timeout", "at-least-once"), option="--mode")
    assert str(info.value) == ("invalid checkpoint option --mode='alinged': must be one of aligned, "
                               "aligned-timeout (or timeout), at-least-once (or at_least_once)")
    with pytest.raises(InvalidOptionError, match="must be one of aligned, unaligned$"):
        parse_mode("none", accepted=("aligned", "unaligned"))  # known, but not taken here
    with pytest.raises(InvalidOptionError, match="mode=None"):
        parse_mode(None)  # type: ignore[arg-type]


def test_checkpointing_keywords() -> None:
    assert parse_mode("timeout").checkpointing(0.5) == {"mode": EO, "unaligned": False, "alignment_timeout": 0.5}
    assert parse_mode("unaligned").checkpointing(0.5) == {"mode": EO, "unaligned": True, "alignment_timeout": None}
    with pytest.raises(InvalidOptionError, match="alignment_timeout=None: mode 'aligned-timeout' needs one"):
        parse_mode("aligned-timeout").checkpointing()
    with pytest.raises(InvalidOptionError, match="takes no checkpoints"):
        parse_mode("none").checkpointing()


def test_the_api_takes_mode_names() -> None:
    config = StreamEnvironment().enable_checkpointing(1, mode="unaligned").checkpoint_config
    assert (config.mode, config.unaligned, config.alignment_timeout) == (EO, True, None)
    config = StreamEnvironment().enable_checkpointing(1, mode="timeout", alignment_timeout=0.2).checkpoint_config
    assert (config.mode, config.unaligned, config.alignment_timeout) == (EO, False, 0.2)
    config = StreamEnvironment().enable_checkpointing(1, mode="at-least-once").checkpoint_config
    assert config.mode is ALO
    with pytest.raises(InvalidOptionError, match="unaligned=True: conflicts with mode='aligned'"):
        StreamEnvironment().enable_checkpointing(1, mode="aligned", unaligned=True)
    with pytest.raises(InvalidOptionError, match="mode 'aligned-timeout' needs one"):
        StreamEnvironment().enable_checkpointing(1, mode="aligned-timeout")
    with pytest.raises(InvalidOptionError, match=r"mode='none': must be one of exactly-once \(or exactly_once\), "):
        StreamEnvironment().enable_checkpointing(1, mode="none")


def test_cli_and_vopr_take_both_spellings_and_name_the_accepted_ones(capsys: pytest.CaptureFixture) -> None:
    args = build_parser().parse_args(["run", "job:build", "--mode", "at_least_once"])
    assert args.mode == "at-least-once"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "job:build", "--mode", "unaligned"])
    assert "--mode: must be one of exactly-once (or exactly_once), at-least-once (or at_least_once)" in \
        capsys.readouterr().err
    assert vopr._mode_name("timeout") == "aligned-timeout"
    assert vopr._mode_name("at-least-once") == vopr._mode_name("at_least_once") == "at-least-once"
