"""One click on the hub: the nbgitpuller link `python -m helpers class link` prints, followed by a
learner in Chromium through the real hub on the local Slurm (root; CI requires it).

The course's upstream is a git repository served by `git daemon` on the head's cluster address
(as a trainer's repository would be served over https). First click: the hub logs the learner
in, starts their server as a Slurm job, nbgitpuller clones the course into their home and
JupyterLab opens the named lesson. Then the learner edits a lesson and the trainer changes
another file upstream; the second click merges the trainer's change and keeps the learner's edit.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from helpers.tools.pull_link import pull_link
from tests.conftest import ROOT, squeue_empty
from tests.hub_support import git, new_hub, served_course, unix_learners, wait_for_page
from tests.test_browser import CHROMIUM_ARGS, SCREENSHOTS, ensure_chromium

pytestmark = pytest.mark.slurm
LESSON = "03_multiworker_ipyparallel.ipynb"
EDIT = "A learner's own note, kept across updates."
UPDATE = "An update from the trainer."


@pytest.fixture
def upstream(slurm, tmp_path):
    with served_course(tmp_path / "served") as course:
        yield course


def _click(page, hub, link: str, learner: dict, login: bool) -> float:
    """Follow the link as the learner; returns the seconds until JupyterLab shows the lesson."""
    started = time.monotonic()
    page.goto(link)
    if login:
        page.fill("input[name=username]", learner["name"])
        page.fill("input[name=password]", learner["password"])
        page.click("input[type=submit], button[type=submit]")
    wait_for_page(page, hub, f"/lab/tree/tf-hpc-course/notebooks/{LESSON}", 240)  # spawn, then nbgitpuller's page
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_selector(f".lm-TabBar-tab:has-text('{LESSON}')", timeout=30_000)
    return time.monotonic() - started


def test_the_class_link_puts_the_course_in_the_learners_home_and_merges_updates(slurm, upstream, tmp_path, report):
    executable = ensure_chromium()
    from playwright.sync_api import sync_playwright

    with unix_learners(1, prefix="pull") as (learner,):
        user, home = learner["name"], learner["home"]
        hub, token = new_hub(tmp_path, slurm, {user: learner["password"]})
        link = pull_link(hub.url, upstream["url"], "main", LESSON[:2])
        course = home / "tf-hpc-course"
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                first = _click(page, hub, link, learner, login=True)
                cloned = sorted(p.name for p in (course / "notebooks").glob("*.ipynb"))
                owner = course.stat().st_uid == (home.stat().st_uid)
                # the learner edits lesson 00; the trainer changes the README upstream
                notebook = course / "notebooks" / "00_environment.ipynb"
                nb = json.loads(notebook.read_text())
                nb["cells"][0]["source"] = [EDIT + "\n\n"] + list(nb["cells"][0]["source"])
                notebook.write_text(json.dumps(nb, indent=1) + "\n")
                shutil.chown(notebook, user, user)
                with (upstream["work"] / "README.md").open("a") as readme:
                    readme.write(f"\n{UPDATE}\n")
                git("commit", "-q", "-am", "an update", cwd=upstream["work"])
                second = _click(page, hub, link, learner, login=False)
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                shot = SCREENSHOTS / "hub-nbgitpuller-lesson-03.png"
                page.screenshot(path=str(shot))
                browser.close()
            readme, kept = (course / "README.md").read_text(), notebook.read_text()
            assert hub.request("DELETE", f"/hub/api/users/{user}/server", token) in (202, 204)
            assert squeue_empty(slurm["env"], within=60), "stopping the server must end its Slurm job"
        except Exception as exc:
            jobs = "".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in
                           sorted(home.glob("jupyterhub-course-*.log")))
            raise AssertionError(f"{exc}\n--- hub log\n{hub.tail()}\n{jobs}") from None
        finally:
            hub.stop()
    report(f"{Path(__file__).stem}: first click to lesson {LESSON[:2]} open (login, Slurm job, clone) {first:.1f} s; "
           f"second click (merge) {second:.1f} s; screenshot {shot}")
    assert cloned == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")), cloned
    assert owner, "the course in the learner's home must be the learner's"
    assert UPDATE in readme, "the second click did not bring the trainer's update"
    assert EDIT in kept, "the second click lost the learner's edit"
