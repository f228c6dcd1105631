"""The two Django environments the suite runs its Django project in (tests/with_django):

- `backport`: the suite's own Python and virtual environment, whose Django is the oldest
  the django-tasks backport supports (pyproject's dev dependencies: Django 4.2 and
  django-tasks);
- `django61`: Django 6.1, which needs Python 3.12 or later while heartq supports 3.11: a
  virtual environment of its own under `.venv/django-6.1`, made once with a Python 3.12+
  of the machine (`HEARTQ_TEST_PYTHON312`, else `python3.12`/`python3.13` on the path,
  else pyenv's), with heartq's dependencies (pyproject's own and its postgres and
  dashboard extras'), Django 6.1 and pytest-django, and this checkout's `src` on its path
  (a `.pth` file): heartq itself is not installed there, so making it never writes the
  checkout's `src/heartq.egg-info`, and may run while the suite's own environment is
  installed. It is remade when its recipe changes (pyproject.toml, the requirements
  here); a lock keeps the suite's processes from making it twice.

`.venv/bin/python tests/with_django/environments.py` makes it ahead (scripts/test does,
beside the install of the suite's own environment), so the suite's own time never
includes the install. It needs only the standard library.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The checkout (`tests.support` says the same, but imports what is not installed yet
when scripts/test runs this module)."""
DJANGO6_REQUIREMENTS = ("django>=6.1,<6.2", "pytest-django>=4.8")
DJANGO6_EXTRAS = ("postgres", "dashboard")
DJANGO6_VENV = ROOT / ".venv" / "django-6.1"
STAMP = "heartq-recipe"
INSTALL_TIMEOUT = 600


@dataclass(frozen=True)
class Flavor:
    """One Django environment: its name and the Python that runs the project there."""

    name: str
    python: str


def backport() -> Flavor:
    return Flavor("backport", sys.executable)


def django61() -> Flavor | str:
    """The Django 6.1 environment, made if needed; or why it cannot be (no Python 3.12
    or later on this machine)."""
    interpreter = python312()
    if interpreter is None:
        return (
            "Django 6.1 needs Python 3.12 or later, and this machine has none "
            "(set HEARTQ_TEST_PYTHON312)"
        )
    return Flavor("django61", str(ensure_django6(interpreter)))


def python312() -> str | None:
    """A Python 3.12 or later to make the Django 6.1 environment with (the first that
    runs: a pyenv shim on the path may name a version pyenv does not select)."""
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [
        os.environ.get("HEARTQ_TEST_PYTHON312"),
        *sorted(glob.glob(f"{pyenv}/versions/3.1[2-9]*/bin/python3")),
        shutil.which("python3.12"),
        shutil.which("python3.13"),
    ]
    for candidate in filter(None, candidates):
        check = [candidate, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"]
        if subprocess.run(check, capture_output=True, timeout=30, check=False).returncode == 0:
            return candidate
    return None


def _recipe(interpreter: str) -> str:
    pyproject = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    source = str(ROOT / "src")  # the `.pth` file's: a copied environment is made again
    return "\n".join([interpreter, source, *DJANGO6_EXTRAS, *DJANGO6_REQUIREMENTS, pyproject])


def heartq_requirements() -> list[str]:
    """heartq's own dependencies and those of `DJANGO6_EXTRAS`, as pyproject.toml lists them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [*project["dependencies"], *(need for name in DJANGO6_EXTRAS for need in extras[name])]


def ensure_django6(interpreter: str) -> Path:
    """The Django 6.1 environment's python, made (or remade) first if its recipe changed."""
    python = DJANGO6_VENV / "bin" / "python"
    stamp = DJANGO6_VENV / STAMP
    recipe = _recipe(interpreter)
    DJANGO6_VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(DJANGO6_VENV.parent / "django-6.1.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == recipe:
            return python
        shutil.rmtree(DJANGO6_VENV, ignore_errors=True)
        _run([interpreter, "-m", "venv", str(DJANGO6_VENV)])
        _run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "--no-compile", *heartq_requirements(), *DJANGO6_REQUIREMENTS]
        )  # fmt: skip
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=True,
        ).stdout.strip()  # fmt: skip
        (Path(site) / "heartq-checkout.pth").write_text(f"{ROOT / 'src'}\n")
        stamp.write_text(recipe)
    return python


def _run(argv: list[str]) -> None:
    done = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"making the Django 6.1 environment failed: {' '.join(argv)}\n{done.stderr}"
        )


if __name__ == "__main__":
    # scripts/test stops this on its way out (SIGTERM): as an exception, so that the pip
    # it runs is killed with it, not left writing into an environment the next run remakes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    made = django61()
    print(made if isinstance(made, str) else f"Django 6.1 environment: {made.python}")
