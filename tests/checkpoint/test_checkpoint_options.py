from __future__ import annotations

import dataclasses

import pytest

from vocabulary.options import CheckpointConfig, CheckpointingMode, InvalidOptionError, RestartStrategy

EO = CheckpointingMode.EXACTLY_ONCE
ALO = CheckpointingMode.AT_LEAST_ONCE


def test_defaults_are_valid_and_disabled() -> None:
    config = CheckpointConfig()
    assert config.interval is None and not config.enabled
    assert (config.mode, config.timeout, config.max_concurrent, config.retained) == (EO, 600.0, 1, 1)


def test_full_valid_config() -> None:
    config = CheckpointConfig(
        interval=0.1, mode=EO, alignment_timeout=0.0, timeout=5, min_pause=0.05, max_concurrent=3,
        tolerable_failures=2, retained=4, storage="/tmp/x", max_aligned_bytes=1 << 20,
    )
    assert config.enabled
    config.validate()


@pytest.mark.parametrize(
    ("kwargs", "option", "fragment"),
    [
        ({"interval": 0}, "interval", "> 0"),
        ({"interval": -1.5}, "interval", "> 0"),
        ({"interval": float("nan")}, "interval", "finite"),
        ({"interval": "1s"}, "interval", "number"),
        ({"interval": True}, "interval", "number"),
        ({"timeout": 0}, "timeout", "> 0"),
        ({"min_pause": -0.1}, "min_pause", ">= 0"),
        ({"max_concurrent": 0}, "max_concurrent", ">= 1"),
        ({"max_concurrent": 1.5}, "max_concurrent", "integer"),
        ({"tolerable_failures": -1}, "tolerable_failures", ">= 0"),
        ({"retained": 0}, "retained", ">= 1"),
        ({"alignment_timeout": -1}, "alignment_timeout", ">= 0"),
        ({"max_aligned_bytes": 0}, "max_aligned_bytes", ">= 1"),
        ({"storage": ""}, "storage", "URI"),
        ({"unaligned": "yes"}, "unaligned", "True or False"),
        ({"mode": "exactly-twice"}, "mode", "EXACTLY_ONCE"),
    ],
)
def test_invalid_value_names_option_value_and_range(kwargs, option, fragment) -> None:
    with pytest.raises(InvalidOptionError) as info:
        CheckpointConfig(**kwargs)
    message = str(info.value)
    assert info.value.option == option
    assert f"{option}=" in message
    assert repr(next(iter(kwargs.values()))) in message or "nan" in message
    assert fragment in message


def test_unaligned_with_at_least_once_is_an_error() -> None:
    with pytest.raises(InvalidOptionError, match=r"unaligned=True.*EXACTLY_ONCE"):
        CheckpointConfig(interval=1, mode=ALO, unaligned=True)


def test_alignment_timeout_with_at_least_once_is_an_error() -> None:
    with pytest.raises(InvalidOptionError, match=r"alignment_timeout=0\.5.*EXACTLY_ONCE"):
        CheckpointConfig(interval=1, mode=ALO, alignment_timeout=0.5)


def test_alignment_timeout_with_unaligned_is_an_error() -> None:
    with pytest.raises(InvalidOptionError, match=r"alignment_timeout=0\.5.*unaligned=True"):
        CheckpointConfig(interval=1, unaligned=True, alignment_timeout=0.5)


def test_validate_rechecks_after_replace() -> None:
    config = CheckpointConfig(interval=1)
    with pytest.raises(InvalidOptionError, match="retained"):
        dataclasses.replace(config, retained=0)


def test_mode_accepts_names_and_values() -> None:
    assert CheckpointConfig(mode="at_least_once").mode is ALO
    assert CheckpointConfig(mode="EXACTLY_ONCE").mode is EO
    assert CheckpointingMode.parse(ALO) is ALO


def test_invalid_option_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        CheckpointConfig(timeout=-1)


def test_restart_strategy_fixed_delay_and_no_restart() -> None:
    strategy = RestartStrategy.fixed_delay(3, 0.5)
    assert strategy.restarts and strategy.can_restart(2) and not strategy.can_restart(3)
    none = RestartStrategy.no_restart()
    assert not none.restarts and not none.can_restart(0)


@pytest.mark.parametrize(
    ("attempts", "delay", "option"),
    [(-1, 0.0, "restart attempts"), (1.5, 0.0, "restart attempts"), (2, -1.0, "restart delay"),
     (2, float("inf"), "restart delay")],
)
def test_restart_strategy_validation_names_option(attempts, delay, option) -> None:
    with pytest.raises(InvalidOptionError) as info:
        RestartStrategy.fixed_delay(attempts, delay)
    assert info.value.option == option
    assert option in str(info.value)


@pytest.mark.parametrize(
    ("build", "option"),
    [(lambda: RestartStrategy.exponential_delay(initial_backoff=-1), "restart initial_backoff"),
     (lambda: RestartStrategy.exponential_delay(initial_backoff=2, max_backoff=1), "restart max_backoff"),
     (lambda: RestartStrategy.exponential_delay(backoff_multiplier=0.5), "restart backoff_multiplier"),
     (lambda: RestartStrategy.exponential_delay(jitter_factor=1.5), "restart jitter_factor"),
     (lambda: RestartStrategy.exponential_delay(reset_backoff_threshold=float("nan")),
      "restart reset_backoff_threshold"),
     (lambda: RestartStrategy.exponential_delay(attempts_before_reset_backoff=-1),
      "restart attempts_before_reset_backoff"),
     (lambda: RestartStrategy.failure_rate(max_failures_per_interval=0), "restart max_failures_per_interval"),
     (lambda: RestartStrategy.failure_rate(failure_rate_interval=0), "restart failure_rate_interval"),
     (lambda: RestartStrategy.failure_rate(delay=-0.1), "restart delay"),
     (lambda: RestartStrategy(kind="forever"), "restart strategy")],
)
def test_restart_strategy_kinds_validate_their_options(build, option) -> None:
    with pytest.raises(InvalidOptionError) as info:
        build()
    assert info.value.option == option and option in str(info.value)


def test_restart_strategy_repr_shows_how_to_build_it() -> None:
    for strategy in (RestartStrategy.fixed_delay(3, 0.5), RestartStrategy.no_restart(),
                     RestartStrategy.exponential_delay(initial_backoff=0.25, attempts_before_reset_backoff=7),
                     RestartStrategy.failure_rate(3, 30.0, 0.5)):
        assert eval(repr(strategy), {"RestartStrategy": RestartStrategy}) == strategy  # noqa: S307
