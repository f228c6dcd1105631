"""A real headless Chromium for the dashboard's end-to-end tests.

The browser is Debian's `chromium` package (scripts/test installs it with apt), driven by
Playwright through `executable_path`: browsers are never downloaded (`playwright install`
is not used), as the machines reach only PyPI, Debian and npm. Tests never silently skip:
without chromium they fail with the reason.

Playwright's sync API cannot run inside a running asyncio loop; the suite is plain pytest.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

REPO_ROOT = Path(__file__).resolve().parent.parent

# What a container needs: no user namespaces for the sandbox (and root), no GPU, and a
# /dev/shm that may be small (Docker's default is 64 MB, which crashes renderers).
CONTAINER_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")


def chromium_path() -> str:
    """Debian's chromium, or a failure saying how to get it (never a skip)."""
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        raise RuntimeError(
            "Debian's chromium is not installed (no `chromium` on PATH, no /usr/bin/chromium):"
            " scripts/test installs it (apt-get install chromium)"
        )
    return path


@contextlib.contextmanager
def launch_chromium() -> Iterator[Browser]:
    """A headless Chromium for one test (or fixture), closed afterwards even on failure."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=list(CONTAINER_FLAGS)
        )
        try:
            yield browser
        finally:
            browser.close()


def screenshot_dir() -> Path:
    """test-artifacts/screenshots/ under the repository root, kept by CI as artifacts."""
    path = REPO_ROOT / "test-artifacts" / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path
