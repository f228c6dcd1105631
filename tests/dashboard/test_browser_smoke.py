"""The browser harness works end to end: Debian's chromium loads a page, runs its
JavaScript, is clicked, and leaves a screenshot, before any dashboard test relies on it."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser_harness import launch_chromium, screenshot_dir

PAGE = """<!doctype html>
<html><body>
<p id="status">waiting</p>
<button id="go">Go</button>
<script>
  document.getElementById("go").addEventListener("click", () => {
    document.getElementById("status").textContent = "clicked";
  });
</script>
</body></html>
"""


class QuietHandler(SimpleHTTPRequestHandler):
    """Serves files without a log line per request on the test's stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def static_site(tmp_path: Path) -> Iterator[str]:
    """The page above on 127.0.0.1, on a port the kernel picks (free, even under xdist)."""
    (tmp_path / "index.html").write_text(PAGE)
    handler = functools.partial(QuietHandler, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_click_changes_text(static_site: str) -> None:
    with launch_chromium() as browser:
        page = browser.new_page()
        page.goto(static_site)
        status = page.locator("#status")
        expect(status).to_have_text("waiting", timeout=15_000)
        page.locator("#go").click(timeout=15_000)
        expect(status).to_have_text("clicked", timeout=15_000)
        shot = screenshot_dir() / "browser_smoke.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 0
