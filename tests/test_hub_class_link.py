"""One click on the hub: the nbgitpuller link `python -m helpers class link` prints, followed by a
learner in Chromium through the real hub on the local Slurm (root; CI requires it).

The course's upstream is a git repository served by `git daemon` on the head's cluster address
(as a trainer's repository would be served over https). First click: the hub logs the learner
in, starts their server as a Slurm job, nbgitpuller clones the course into their home and
JupyterLab opens the named lesson. Then the learner edits a lesson and the trainer changes
another file upstream; the second click merges the trainer's change and keeps the learner's edit.

And a link someone else posts pulls nothing else: nbgitpuller joins `targetpath` onto the home
unchecked, so a classmate's repository pulled into `~/.local/share/jupyter/kernels/python3`
replaced the learner's kernel spec, and their next kernel ran the classmate's command. The
course's server extension (course_server) lets a click pull the course's repository and branch
into the course's directory only.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode
import shutil
import time
from pathlib import Path

import pytest

from helpers.commands.pull_link import pull_link
from tests.conftest import ROOT, squeue_empty
from tests.support.hub import git, git_repository, hub_log_in, new_hub, run_in_kernel, served_course, \
    unix_learners, wait_for_page
from tests.support.terminals import terminal_token
from tests.support.browser import SCREENSHOTS, chromium_page, ensure_chromium

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
        hub_log_in(page, learner["name"], learner["password"])
    wait_for_page(page, hub, f"/lab/tree/tf-hpc-course/notebooks/{LESSON}", 240)  # spawn, then nbgitpuller's page
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_selector(f".lm-TabBar-tab:has-text('{LESSON}')", timeout=30_000)
    return time.monotonic() - started


def test_the_class_link_puts_the_course_in_the_learners_home_and_merges_updates(slurm, upstream, tmp_path, report):
    ensure_chromium()  # before the hub starts: a skip, or a failure where CI requires the browser

    with unix_learners(1, prefix="pull") as (learner,):
        user, home = learner["name"], learner["home"]
        hub, token = new_hub(tmp_path, slurm, {user: learner["password"]}, env={"COURSE_PULL_REPO": upstream["url"]})
        link = pull_link(hub.url, upstream["url"], "main", LESSON[:2])
        course = home / "tf-hpc-course"
        try:
            with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
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


KERNELS = Path(".local/share/jupyter/kernels/python3")
REFUSED = "refused by the course"


def _outcome(page, user: str, timeout: float = 60) -> str:
    """The page's text once nbgitpuller's page (or its API) has answered: refused, finished or failed
    (nbgitpuller's own page shows a failed pull in a terminal widget: then the text at the timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = page.inner_text("body") if page.query_selector("body") else ""
        if "403" in text or '"phase": "finished"' in text or '"phase": "error"' in text \
                or f"/user/{user}/git-pull" not in page.url:
            return text
        page.wait_for_timeout(500)
    return f"(no answer within {timeout:.0f} s) {text}"


def test_a_link_to_another_repository_or_directory_pulls_nothing(slurm, upstream, tmp_path, report):
    """A classmate's repository served by git daemon, pulled into the kernel specs (relative, absolute,
    through `..`, by nbgitpuller's page and by its API), the course's repository into the kernel specs
    or at another branch: each refused with a 403 that says why, the learner's kernel specs untouched
    and their next kernel the course's; the course's own link still opens the lesson."""
    ensure_chromium()  # before the hub starts: a skip, or a failure where CI requires the browser

    theirs = upstream["work"].parent / "theirs"
    git_repository(theirs, {"kernel.json": json.dumps({
        "argv": ["/bin/sh", "-c", 'touch "$HOME/ran-their-command"'], "display_name": "Python 3", "language": "python"})})
    their_repo = f"{upstream['base']}/theirs"
    with unix_learners(1, prefix="pvic") as (learner,):
        user, home = learner["name"], learner["home"]
        hub, token = new_hub(tmp_path, slurm, {user: learner["password"]}, env={"COURSE_PULL_REPO": upstream["url"]})

        def link(repo: str, targetpath: str, branch: str = "main", api: bool = False) -> str:
            query = urlencode({"repo": repo, "branch": branch, "targetpath": targetpath, "urlpath": "lab"})
            return f"{hub.url}/hub/user-redirect/git-pull{'/api' if api else ''}?{query}"

        attacks = {
            "their repository into the kernel specs": link(their_repo, str(KERNELS)),
            "an absolute targetpath": link(their_repo, str(home / KERNELS)),
            "a targetpath through ..": link(their_repo, f"tf-hpc-course/../{KERNELS}"),
            "nbgitpuller's API directly": link(their_repo, str(KERNELS), api=True),
            "the course's repository into the kernel specs": link(upstream["url"], str(KERNELS)),
            "the course's repository at another branch": link(upstream["url"], "tf-hpc-course", branch="theirs"),
        }
        answers, started = {}, time.monotonic()
        try:
            with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
                for n, (what, url) in enumerate(attacks.items()):
                    page.goto(url)
                    if n == 0:  # the first click logs the learner in and starts their server
                        hub_log_in(page, learner["name"], learner["password"])
                        wait_for_page(page, hub, f"/user/{user}/git-pull", 240)
                    answers[what] = _outcome(page, user)
                    if (home / KERNELS).exists():
                        break
                attacked = time.monotonic() - started
                if (home / KERNELS).exists():  # what the learner's next kernel does (today's nbgitpuller)
                    hub.call("POST", f"/user/{user}/api/kernels", token, {"name": "python3"})
                    deadline = time.monotonic() + 30
                    while not (home / "ran-their-command").exists() and time.monotonic() < deadline:
                        time.sleep(0.3)
                    raise AssertionError(
                        f"the link '{what}' planted {home / KERNELS}: {sorted(p.name for p in (home / KERNELS).iterdir())}; "
                        f"the learner's next kernel ran their command: {(home / 'ran-their-command').exists()}")
                kernel = run_in_kernel(hub, user, token, ["import sys\nprint(sys.executable)"], timeout=120)[0]
                terminal = terminal_token(f"{hub.url}/user/{user}", token)  # item: an sbatch there keeps no token
                specs = (home / KERNELS.parent).exists() or (home / "ran-their-command").exists()
                opened = _click(page, hub, pull_link(hub.url, upstream["url"], "main", LESSON[:2]), learner, login=False)
        except Exception as exc:
            raise AssertionError(f"{exc}\n--- hub log\n{hub.tail()}") from None
        finally:
            hub.call("DELETE", f"/hub/api/users/{user}/server", token)
            hub.stop()
    for what, text in answers.items():
        print(f"{what}: {' '.join(text.split())[:300]}")
    report(f"{Path(__file__).stem}: {len(attacks)} attack links refused in {attacked:.1f} s (login and spawn included); "
           f"the course's link then opened lesson {LESSON[:2]} in {opened:.1f} s; a terminal's hub token: {terminal}")
    assert all("403" in text and REFUSED in text for text in answers.values()), answers
    assert not specs, "the learner's kernel specs changed"
    assert kernel.strip().endswith("/python"), f"the learner's kernel is not the course's Python: {kernel}"
    assert terminal == "none", f"the learner's terminal holds the hub's token ({terminal[:6]}...)"
