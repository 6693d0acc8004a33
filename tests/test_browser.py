"""The course as users open it: JupyterLab in a real browser (Chromium driven by Playwright).

Debian's Chromium is used (no browser download). Where it cannot be installed (not root, no
apt) the test is skipped with the reason; CI sets COURSE_REQUIRE_BROWSER=1, which turns that
skip into a failure. The screenshot path is printed and kept under build/screenshots/.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import nbformat

from tests.conftest import ROOT, Lab
from tests.support.browser import CHROMIUM_ARGS, SCREENSHOTS, ensure_chromium, wait_kernel_idle


def test_run_notebook_00_in_jupyterlab(tmp_path, report):
    executable = ensure_chromium()
    from playwright.sync_api import sync_playwright

    work = tmp_path / "notebooks"
    work.mkdir()
    shutil.copy(ROOT / "notebooks" / "00_environment.ipynb", work)
    timings, started = {}, time.monotonic()
    lab = Lab(work, tmp_path / "runtime")
    timings["lab up"] = time.monotonic() - started
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            t = time.monotonic()
            page.goto(f"{lab.url}/lab/tree/00_environment.ipynb?token={lab.token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            wait_kernel_idle(page, lab.url, 90, lab.token)
            timings["notebook open, kernel idle"] = time.monotonic() - t
            t = time.monotonic()
            page.click("text=Run", timeout=10_000)             # the menu bar's Run menu
            page.click("text=Run All Cells", timeout=10_000)
            # the proof cell's *output* (its source contains the same words)
            page.wait_for_selector(".jp-OutputArea-output:has-text('environment OK:')", timeout=300_000)
            wait_kernel_idle(page, lab.url, 300, lab.token)
            timings["run all cells"] = time.monotonic() - t
            proof = page.locator(".jp-OutputArea-output", has_text="environment OK:").first.inner_text()
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shot = SCREENSHOTS / "00_environment-jupyterlab.png"
            page.screenshot(path=str(shot), full_page=True)
            page.keyboard.press("Control+s")
            time.sleep(1.0)
            browser.close()
        saved = nbformat.read(work / "00_environment.ipynb", as_version=4)
        failed = [o for c in saved.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if o.get("output_type") == "error"]
        unrun = [i for i, c in enumerate(saved.cells) if c.cell_type == "code" and not c.get("execution_count")]
    except Exception:
        print("the end of JupyterLab's log:\n" + lab.log_tail())
        raise
    finally:
        lab.stop()
    report(f"{Path(__file__).stem}: screenshot {shot}")
    report(f"{Path(__file__).stem}: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    assert "environment OK" in proof
    assert not failed, [f"{o['ename']}: {o['evalue']}" for o in failed]
    assert not unrun, f"cells not run: {unrun}"
