"""Old Python + PyTorch stacks for tests: what runs on a Jetson must run on its own Python and PyTorch.

`provide_stack("3.6", "1.10.2")` returns an interpreter of that Python with that torch and
nothing else: a venv made once under `.stacks/` (which `make clean` removes) from an
interpreter the machine offers, so later runs do not download again. The interpreter is
found, in order, in the environment variable `PERF4SIGHT_PY36` (`PERF4SIGHT_PY38`, ...; an
interpreter that already imports that torch is used as it is), in pyenv's versions
(`$PYENV_ROOT/versions/3.6.*`, default `~/.pyenv`), or as `python3.6` on PATH. Where none is
found, `StackUnavailable` says how to provide one (the fixtures skip with that message).

Run as a script (`make test` starts it before installing `.venv`, so that the downloads overlap
the install), it makes every stack perf4sight checks, side by side, and says what it made.
"""

from __future__ import annotations

import ast
import fcntl
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STACKS_DIR = ROOT / ".stacks"

# The pip a venv starts with may be too old to resolve torch's dependencies (Python 3.6
# venvs come with pip 18.1); the newest pip each Python still runs is installed first.
_PIP = {"3.6": "pip==21.3.1", "3.7": "pip==24.0", "3.8": "pip==25.0.1"}
_STAMP = ".complete"


class StackUnavailable(Exception):
    """No interpreter of the wanted Python version on this machine."""


@dataclass(frozen=True)
class OldStack:
    """An interpreter with a given PyTorch and nothing of the host (no PYTHONPATH, no user site)."""

    python: Path
    python_version: str
    torch_version: str

    @property
    def name(self) -> str:
        return stack_name(self.python_version, self.torch_version)

    def run(self, args: list[Any], **kwargs: Any) -> subprocess.CompletedProcess:
        """Run the interpreter with `args`; text output captured unless told otherwise."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run([str(self.python), *map(str, args)], env=clean_env(kwargs.pop("env", None)), **kwargs)

    def popen(self, args: list[Any], **kwargs: Any) -> subprocess.Popen:
        """Start the interpreter with `args` in the background."""
        return subprocess.Popen([str(self.python), *map(str, args)], env=clean_env(kwargs.pop("env", None)), **kwargs)


def stack_name(python_version: str, torch_version: str) -> str:
    """`py36-torch1.10.2`: the stack's folder under `.stacks/` and its test id."""
    return f"py{python_version.replace('.', '')}-torch{torch_version}"


def env_var(python_version: str) -> str:
    """The variable naming an interpreter of this Python version (`PERF4SIGHT_PY36`)."""
    return f"PERF4SIGHT_PY{python_version.replace('.', '')}"


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without what points Python at the host's packages."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    env.update(extra or {})
    return env


def _probe(python: Path, code: str) -> str | None:
    """What `code` prints under `python`, None where it fails."""
    run = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=clean_env(), timeout=300)
    return run.stdout.strip() if run.returncode == 0 else None


def _python_version(python: Path) -> str | None:
    """`3.6` for a Python 3.6 interpreter."""
    return _probe(python, "import sys; print('%d.%d' % sys.version_info[:2])")


def _torch_version(python: Path) -> str | None:
    """The version of the torch the interpreter imports, without its local part (`+cu102`)."""
    version = _probe(python, "import torch; print(torch.__version__)")
    return version.split("+")[0] if version else None


def find_interpreter(python_version: str) -> Path:
    """An interpreter of `python_version`: the one the environment variable names, else pyenv's or PATH's."""
    given = os.environ.get(env_var(python_version))
    if given:
        if Path(given).is_file() and _python_version(Path(given)) == python_version:
            return Path(given)
        raise StackUnavailable(f"{env_var(python_version)}={given} is not a Python {python_version} interpreter")
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(pyenv.glob(f"{python_version}.*/bin/python{python_version}"), reverse=True)
    on_path = shutil.which(f"python{python_version}")
    candidates += [Path(on_path)] if on_path else []
    for candidate in candidates:
        if _python_version(candidate) == python_version:
            return candidate
    raise StackUnavailable(
        f"no Python {python_version} found: install it (`pyenv install {python_version}`) "
        f"or set {env_var(python_version)} to its interpreter"
    )


def _step(args: list[str], log: Path) -> None:
    with log.open("a") as out:
        out.write("$ " + " ".join(args) + "\n")
        out.flush()
        code = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=clean_env()).returncode
    if code != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise RuntimeError(f"making the stack failed ({' '.join(args)}, exit {code}); {log}:\n{tail}")


def provide_stack(python_version: str, torch_version: str) -> OldStack:
    """The interpreter of this stack, its venv created first where missing or half-made."""
    interpreter = find_interpreter(python_version)
    if os.environ.get(env_var(python_version)) and _torch_version(interpreter) == torch_version:
        return OldStack(interpreter, python_version, torch_version)
    venv = STACKS_DIR / stack_name(python_version, torch_version)
    python = venv / "bin" / "python"
    STACKS_DIR.mkdir(exist_ok=True)
    with (STACKS_DIR / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be making it
        if not (venv / _STAMP).is_file():
            shutil.rmtree(venv, ignore_errors=True)
            log = STACKS_DIR / f"{venv.name}.log"
            log.write_text("")
            _step([str(interpreter), "-m", "venv", str(venv)], log)
            _step([str(python), "-m", "pip", "install", "--upgrade", _PIP.get(python_version, "pip")], log)
            # --no-cache-dir: the wheel (0.7-0.9 GB, with CUDA) is not kept a second time in
            # pip's cache, beside the stack it is installed in, on a disk the CI shares
            _step([str(python), "-m", "pip", "install", "--no-cache-dir", f"torch=={torch_version}"], log)
            if _torch_version(python) != torch_version:
                raise RuntimeError(f"{python} does not import torch {torch_version}; see {log}")
            (venv / _STAMP).write_text(f"{sys.platform} python {python_version} torch {torch_version}\n")
    return OldStack(python, python_version, torch_version)


def checked_stacks() -> tuple[tuple[str, str], ...]:
    """perf4sight's `CHECKED_STACKS`, read from its source: this script runs before perf4sight
    is installed."""
    source = ROOT / "src" / "perf4sight" / "networks" / "model_writer.py"
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        names = [getattr(target, "id", None) for target in getattr(node, "targets", ())]
        if isinstance(node, ast.Assign) and names == ["CHECKED_STACKS"]:
            return ast.literal_eval(node.value)
    raise LookupError(f"no CHECKED_STACKS in {source}")


def provide_stacks(stacks: tuple[tuple[str, str], ...]) -> dict[tuple[str, str], OldStack | StackUnavailable]:
    """Every stack of `stacks`, made side by side (their downloads overlap)."""
    with ThreadPoolExecutor(len(stacks)) as pool:
        futures = {stack: pool.submit(provide_stack, *stack) for stack in stacks}
    return {stack: future.exception() if isinstance(future.exception(), StackUnavailable) else future.result()
            for stack, future in futures.items()}


if __name__ == "__main__":
    for (python_version, torch_version), made in provide_stacks(checked_stacks()).items():
        print(f"{stack_name(python_version, torch_version)}: {made}")
