"""Draw the README's picture of the dashboard: `docs/images/dashboard.png`.

    .venv/bin/python scripts/dashboard_screenshot.py

A queue on a temporary SQLite file with the demo's workers running jobs, a worker
SIGKILLed mid-job, a few jobs that fail for good; then `heartq dashboard` and Debian's
chromium (tests/browser_harness.py) take the overview. Nothing here is a test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.browser_harness import launch_chromium  # noqa: E402
from tests.cli.helpers import HeartqCli, clean_env, wait_for  # noqa: E402
from tests.dashboard.test_browser_e2e import TASKS  # noqa: E402
from tests.support import free_port  # noqa: E402

OUT = REPO / "docs" / "images" / "dashboard.png"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="heartq-shot-") as tmp:
        work = Path(tmp)
        (work / "tasks.py").write_text(TASKS)
        cli = HeartqCli(f"sqlite:///{work / 'heartq.db'}", work)
        cli("migrate").ok()
        procs = [cli.start_worker("--concurrency", "4", log=f"w{i}.log") for i in range(3)]
        port = free_port()
        procs.append(
            subprocess.Popen(
                cli.argv(["dashboard", "--port", str(port), "--allow-actions"], cli.url),
                cwd=work,
                env=clean_env(),
                start_new_session=True,
            )
        )
        try:
            for n in range(40):
                cli.add("progress", {"seconds": 2.0 + (n % 5)})
            for n in range(4):
                cli.add("fail", {"text": f"upstream answered 503 (try {n})"})
            hold = cli.add("hold", {"seconds": 30.0})
            wait_for(lambda: cli.job(hold)["status"] == "running", what="the hold job")
            victim = cli.job(hold)["worker_id"]
            for proc in procs[:3]:
                if victim.endswith(f"-{proc.pid}") or f"-{proc.pid}-" in victim:
                    os.kill(proc.pid, signal.SIGKILL)
            time.sleep(6)  # let the chart gather a few minutes' worth of bars' heights
            with launch_chromium() as browser:
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_selector("[data-testid=chart]")
                page.screenshot(path=str(OUT))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            cli.close()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
