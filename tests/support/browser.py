"""Debian's headless Chromium for the tests that open the course in a browser (Playwright drives it):
installed with apt where missing and root, else the test is skipped with the reason, or fails where
COURSE_REQUIRE_BROWSER=1 (CI); a page, and JupyterLab's kernel waited for until idle and connected."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager

from helpers.commands.apt import apt_install
from tests.conftest import ROOT
from tests.support.required import unavailable

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOTS = ROOT / "build" / "screenshots"


def ensure_chromium() -> str:
    """Debian's Chromium, installed with apt when missing and we are root."""
    if not os.path.exists(CHROMIUM):
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            unavailable(f"browser test not possible: {CHROMIUM} is missing and cannot be installed here "
                        "(needs root and apt-get)", "COURSE_REQUIRE_BROWSER")
        done = apt_install("chromium")
        if done.returncode != 0 or not os.path.exists(CHROMIUM):
            unavailable(f"browser test not possible: apt-get install chromium failed: {done.stderr[-500:]}",
                        "COURSE_REQUIRE_BROWSER")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        unavailable("browser test not possible: the playwright package is not installed (pip install -e '.[test]')",
                    "COURSE_REQUIRE_BROWSER")
    return CHROMIUM


@contextmanager
def chromium_page(**page_options) -> Iterator:
    """A page in Debian's headless Chromium (installed when missing); the browser closes on the way out."""
    executable = ensure_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(**page_options)
        finally:
            browser.close()


def wait_kernel_idle(page, base: str, timeout: float, token: str | None = None) -> None:
    """JupyterLab shows idle before the kernel is connected: ask the server.

    With the page's cookies, or with `token` where we have it: once in CI the cookies were not
    (yet) accepted and the server answered 403 while the page itself worked.
    """
    headers = {"Authorization": f"token {token}"} if token else None
    deadline, last = time.monotonic() + timeout, "no answer"
    while time.monotonic() < deadline:
        answer = page.request.get(f"{base}/api/kernels", headers=headers)
        kernels = answer.json() if answer.ok else None
        if isinstance(kernels, list):
            if kernels and all(k["execution_state"] == "idle" and k["connections"] > 0 for k in kernels):
                return
            last = f"kernels {[(k['execution_state'], k['connections']) for k in kernels]}"
        else:  # an error object, e.g. {"message": "Forbidden"} (HTTP 403)
            last = f"HTTP {answer.status}: {answer.text()[:300]}"
            print(f"wait_kernel_idle: /api/kernels answered {last}")
        page.wait_for_timeout(500)  # lets Playwright process events (time.sleep would not)
    raise AssertionError(f"kernel not idle and connected within {timeout:.0f} s; last answer: {last}")
