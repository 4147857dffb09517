"""A `barrierflow` command for tests that drive the CLI as a user would: it runs THIS checkout's
code (whatever `pip install -e` last pointed the installed command at), from a script outside the
user's folder, so the job module is found the way the installed command finds it (not because the
current folder happens to be on `sys.path`), and without PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_LAUNCHER = """#!{python}
import sys
sys.path.append({repo!r})
from runtime.cli import main
sys.exit(main())
"""


def install_launcher(bin_dir: Path) -> Path:
    """Write an executable `bin_dir/barrierflow` that runs this checkout's CLI; return its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    launcher = bin_dir / "barrierflow"
    launcher.write_text(_LAUNCHER.format(python=sys.executable, repo=str(REPO)))
    launcher.chmod(0o755)
    return launcher


def user_env(bin_dir: Path) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH, `bin_dir` (the launcher) first on PATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_cli(bin_dir: Path, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`barrierflow ARGS` in `cwd` as a user would run it (see the module docstring)."""
    launcher = install_launcher(bin_dir)
    return subprocess.run([str(launcher), *args], cwd=cwd, env=user_env(bin_dir), capture_output=True,
                          text=True, timeout=timeout)


def job_folder(tmp_path: Path, module: str, name: str = "myjob") -> Path:
    """A user's working folder under `tmp_path` holding `<name>.py` with `module`'s text (the
    launcher goes beside it, in `bin/`)."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / f"{name}.py").write_text(module)
    return folder
