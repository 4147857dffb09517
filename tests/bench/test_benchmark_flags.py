"""Every benchmark (`python -m benchmarks.<name>`) takes `--out DIR`, `--json PATH` and `--quick`
through the shared helper in `benchmarks.report`."""

from __future__ import annotations

import importlib
import json
import pkgutil

import pytest

import benchmarks

#: command-line tools in the package that are not benchmarks
TOOLS = {"plots", "nexmark_flink"}  # nexmark_flink: the child a run of benchmarks.nexmark --flink starts in the peers venv


def benchmark_modules() -> list[str]:
    names = []
    for info in pkgutil.iter_modules(benchmarks.__path__):
        if info.name in TOOLS:
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        if callable(getattr(module, "main", None)):
            names.append(info.name)
    return sorted(names)


BENCHMARKS = benchmark_modules()


def test_the_benchmarks_are_found() -> None:
    assert {"checkpoint_modes", "state_storage", "throughput", "sim_speed", "gate_speed"} <= set(BENCHMARKS)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_help_lists_out_json_and_quick(name: str, capsys) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--out DIR", "--json PATH", "--quick"):
        assert flag in text, f"benchmarks.{name} --help does not list {flag}"


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_directory_as_json_is_a_clear_error(name: str, tmp_path, capsys) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--json", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --json: must be a file path, got the directory '{tmp_path}'" in err
    assert "Traceback" not in err


def test_state_storage_out_is_a_directory_with_table_and_json(tmp_path) -> None:
    from benchmarks import state_storage

    out = tmp_path / "out"
    assert state_storage.main(["--quick", "--keys", "500", "--checkpoints", "2", "--configs", "full",
                               "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["state_storage.json", "state_storage.md"]
    assert json.loads((out / "state_storage.json").read_text())["results"][0]["config"] == "full"
    assert "| full |" in (out / "state_storage.md").read_text()


def test_quick_picks_the_small_sizes_and_json_goes_where_asked(tmp_path) -> None:
    from benchmarks import sim_speed

    path = tmp_path / "elsewhere" / "speed.json"
    assert sim_speed.main(["--quick", "--records", "2000", "--out", str(tmp_path / "out"), "--json", str(path)]) == 0
    payload = json.loads(path.read_text())
    assert len(payload["runs"]) == 1  # --repeat defaults to 1 with --quick
    assert (tmp_path / "out" / "sim_speed.md").exists() and not (tmp_path / "out" / "sim_speed.json").exists()


@pytest.mark.parametrize("args", [["--executor", "sim", "--address", "127.0.0.1:6379"],
                                  ["--executor", "sim", "--checkpoint-dir", "s3://bucket/bench"]])
def test_throughputs_cluster_options_are_refused_off_ray(args: list[str], capsys) -> None:
    from benchmarks import throughput

    with pytest.raises(SystemExit) as exit_info:
        throughput.main(args)
    assert exit_info.value.code == 2
    assert "--address and --checkpoint-dir apply to --executor ray only" in capsys.readouterr().err
