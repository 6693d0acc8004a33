"""The course as a centre offers it: JupyterHub, each server a Slurm job, driven in Chromium.

Root only (a test user is created, the local Slurm brought up); CI sets COURSE_REQUIRE_SLURM=1
and COURSE_REQUIRE_BROWSER=1, so a skip is a failure there. The hub loads the shipped
slurm/jupyterhub/jupyterhub_config.py and overrides only what one machine needs: its own
addresses and ports, a test authenticator, `runuser` instead of sudo, and node addresses
looked up in Slurm (the emulated nodes' names resolve only inside their namespaces).
Everything created (user, hub database, cookie secret, jobs, processes) is removed.
"""

from __future__ import annotations

import secrets
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, leftovers, squeue, squeue_empty
from tests.support.hub import hub_log_in, new_hub, wait_for_page
from tests.support.browser import SCREENSHOTS, chromium_page, ensure_chromium, wait_kernel_idle
from tests.support.lesson_probe import DONE, read_probe, write_probe

pytestmark = pytest.mark.slurm


@pytest.fixture
def test_user(other_user):
    """A non-root learner with the course notebooks in their home (removed after, by other_user), and
    lesson 03's start-up as a probe notebook beside them (tests/support/lesson_probe.py)."""
    name, home = other_user["name"], other_user["home"]
    shutil.copytree(ROOT / "notebooks", home / "notebooks")
    write_probe(home / "notebooks")
    subprocess.run(["chown", "-R", f"{name}:{name}", str(home / "notebooks")], check=True)
    probe = subprocess.run(["runuser", "-u", name, "--", sys.executable, "-c", "import helpers, jupyterhub"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.fail(f"user {name} cannot import jupyterhub from {sys.executable}: {probe.stderr[-500:]}")
    return {**other_user, "password": secrets.token_urlsafe(16)}


def test_hub_server_as_slurm_job_runs_notebook_03(slurm, test_user, tmp_path, report):
    """Through Chromium, the learner's server a Slurm job on two nodes: lesson 03's start-up (its own cells up
    to the strategy, then an all-reduce over both workers and the engines' stop) run from JupyterLab, its
    engines an srun step of the server's job. Lesson 03 runs whole on Slurm engines in a 2-task allocation
    (test_lessons_in_class_layouts: every cell, its proof included, ran without an error; its start-up in a
    learner's server job of each class layout), and whole on local engines in the nbval pass."""
    ensure_chromium()  # before the hub starts: a skip, or a failure where CI requires the browser
    timings, user = {}, test_user["name"]
    started = time.monotonic()
    hub, token = new_hub(tmp_path, slurm, {user: test_user["password"]})
    directory = hub.directory
    try:
        timings["hub up"] = time.monotonic() - started
        for name in ("jupyterhub_cookie_secret", "jupyterhub.sqlite"):
            mode = stat.S_IMODE((directory / name).stat().st_mode)
            assert mode & 0o077 == 0, f"{name} is readable by others: {oct(mode)}"
        with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
            t = time.monotonic()
            hub_log_in(page, user, test_user["password"], hub.url)
            wait_for_page(page, hub, f"/user/{user}/lab", 180)  # spawn-pending page until the job runs
            page.wait_for_selector(".jp-LabShell, #jp-main-dock-panel", timeout=120_000)
            timings["login to JupyterLab ready (Slurm job included)"] = time.monotonic() - t
            jobs = squeue(slurm["env"]) or ""
            assert "jupyterh" in jobs, f"the server should be a Slurm job: {jobs!r}"
            base = f"{hub.url}/user/{user}"
            t = time.monotonic()
            page.goto(f"{base}/lab/tree/notebooks/03_startup_probe.ipynb")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            wait_kernel_idle(page, base, 120)
            page.click("text=Run", timeout=10_000)
            page.click("text=Run All Cells", timeout=10_000)
            try:  # the probe's last *output* (its source contains the same words)
                page.wait_for_selector(f".jp-OutputArea-output:has-text('{DONE}')", timeout=300_000)
            except Exception:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOTS / "03_multiworker-jupyterhub-failed.png"))
                outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
                errors = [line for o in outputs for line in o.splitlines()
                          if "Error" in line and not line.strip().startswith("File ")]
                raise AssertionError("lesson 03's start-up did not end; error lines:\n" + "\n".join(errors[-12:])
                                     + "\nlast output:\n" + (outputs[-1][-1500:] if outputs else "")) from None
            timings["lesson 03's start-up and an all-reduce (engines an srun step in the server's job)"] = \
                time.monotonic() - t
            engines = read_probe(test_user["home"] / "notebooks" / "probe.json")
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shot = SCREENSHOTS / "03_multiworker-jupyterhub.png"
            page.screenshot(path=str(shot))
        t = time.monotonic()
        assert hub.request("DELETE", f"/hub/api/users/{user}/server", token) in (202, 204)
        assert squeue_empty(slurm["env"], within=60), "stopping the server must end its Slurm job"
        timings["server stopped from the hub, squeue empty"] = time.monotonic() - t
    except Exception as exc:
        jobs = "".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in
                       sorted(test_user["home"].glob("jupyterhub-course-*.log")))
        raise AssertionError(f"{exc}\n--- hub log\n{hub.tail()}\n{jobs}") from None
    finally:
        hub.stop()
    report(f"{Path(__file__).stem}: screenshot {shot}")
    report(f"{Path(__file__).stem}: " + "; ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    # the probe's own checks passed (ranks 0 and 1, each all-reduce summed both replicas); these are its figures
    assert [(e["rank"], e["in_sync"], e["all_reduced"]) for e in engines] == [(0, 2, 2.0), (1, 2, 2.0)], engines
    assert "node2" in {e["host"] for e in engines}, f"an engine should have run on node2: {engines}"
    left = [p for p in leftovers() if user in p or "jupyterhub" in p or "ipengine" in p]
    assert not left, left
