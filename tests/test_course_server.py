"""The hub servers' extension (course_server): which pull links pass, and a Jupyter server run with
the hub's flags (server.sbatch.j2) answering them, its terminals without the hub's token.

The same attack through the real hub, Slurm and Chromium is in test_hub_class_link.
"""

from __future__ import annotations

import html
import re
import urllib.error
import urllib.request
from urllib.parse import urlencode

import pytest

from course_server.pull import Course, refusal
from course_server.terminals import CourseTerminalManager
from tests.conftest import ROOT, Lab
from tests.support.terminals import terminal_token

REPO = "https://git.example.org/course/tf-hpc-course.git"
COURSE = Course(REPO, "main", "tf-hpc-course")
GOOD = {"repo": REPO, "branch": "main", "targetpath": "tf-hpc-course",
        "urlpath": "lab/tree/tf-hpc-course/notebooks/03_multiworker_ipyparallel.ipynb"}


def _args(**change) -> dict[str, list[str]]:
    values = {**GOOD, **change}
    return {k: v if isinstance(v, list) else [v] for k, v in values.items() if v is not None}


def test_the_course_link_passes():
    assert refusal(_args(), COURSE) is None
    assert refusal(_args(urlpath=None, subpath="notebooks", depth="1", backup="true"), COURSE) is None


@pytest.mark.parametrize("change, says", [
    ({"repo": "git://10.0.0.5/theirs"}, "is not the course's"),
    ({"repo": REPO + "/"}, "is not the course's"),
    ({"repo": None}, "is not the course's"),
    ({"branch": "theirs"}, "branch 'theirs'"),
    ({"branch": None}, "branch '(none)'"),
    ({"targetpath": ".local/share/jupyter/kernels/python3"}, "targetpath"),
    ({"targetpath": "/home/someone/.local/share/jupyter/kernels/python3"}, "targetpath"),
    ({"targetpath": "tf-hpc-course/../.local/share/jupyter/kernels/python3"}, "targetpath"),
    ({"targetpath": None, "targetPath": ".bashrc.d"}, "targetPath is not taken"),
    ({"targetPath": ".local"}, "targetPath is not taken"),
    # nbgitpuller reads an empty value as none: targetpath= pulls into the home itself
    ({"targetpath": "", "targetPath": "tf-hpc-course"}, "targetpath is empty"),
    ({"targetpath": ""}, "targetpath is empty"),
    ({"targetpath": None}, "targetpath '(none)'"),  # the API would pull into ~/<the repository's name>
    ({"targetpath": None, "targetPath": "tf-hpc-course"}, "targetPath is not taken"),  # the course's, misspelt
    ({"targetpath": "Tf-Hpc-Course"}, "targetpath 'Tf-Hpc-Course'"),
    ({"urlpath": "", "urlPath": "lab/tree/.local"}, "urlpath is empty"),
    ({"subpath": ""}, "subpath is empty"),
    ({"targetpath": ["tf-hpc-course", ".local"]}, "more than once"),
    ({"repo": [REPO, "git://x/theirs"]}, "more than once"),
    ({"urlpath": "lab/tree/.local/share"}, "not a page of"),
    ({"urlpath": "lab/tree/tf-hpc-course/../../x"}, "not a page of"),
    ({"urlpath": "//evil.example.org/lab/tree/tf-hpc-course"}, "not a page of"),
    ({"subpath": "../.ssh"}, "leaves the course's directory"),
    ({"depth": "1; rm"}, "not a number"),
])
def test_anything_else_is_refused_with_the_reason(change, says):
    reason = refusal(_args(**change), COURSE)
    assert reason and says in reason, reason


@pytest.mark.parametrize("targetpath", ["", None])
def test_a_pull_into_the_home_itself_is_refused_when_the_repository_is_named_as_the_directory(targetpath):
    """A repository URL ending in the course's directory name: nbgitpuller's API joins an empty or
    absent targetpath as '' (the home itself), its page as the repository's name; both refused."""
    course = Course(REPO.removesuffix(".git"), "main", "tf-hpc-course")
    reason = refusal(_args(repo=course.repo, targetpath=targetpath), course)
    assert reason and "targetpath" in reason, reason


def test_a_hub_without_a_course_repository_pulls_nothing():
    assert "COURSE_PULL_REPO" in refusal(_args(), Course.from_environment({}))
    assert Course.from_environment({"COURSE_PULL_REPO": REPO}) == COURSE


def test_a_hub_repository_with_credentials_pulls_nothing_and_is_not_shown():
    course = Course("https://alice:ghp_secret@git.example.org/c.git")
    assert "carries credentials" in refusal(_args(repo=course.repo), course)


def test_a_terminal_starts_without_the_hub_token(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret-hub-token")
    monkeypatch.setenv("JPY_API_TOKEN", "secret-hub-token")
    env = CourseTerminalManager(shell_command=["sh"], extra_env={"JUPYTER_SERVER_ROOT": "/x"}).make_term_env()
    assert "JUPYTERHUB_API_TOKEN" not in env and "JPY_API_TOKEN" not in env and env["JUPYTER_SERVER_ROOT"] == "/x"


# ------------------------------------------------------------------ a Jupyter server with the hub's flags
def _hub_flags() -> list[str]:
    """The extension flags the hub's batch script passes its server, read from the script itself."""
    script = (ROOT / "slurm" / "jupyterhub" / "server.sbatch.j2").read_text()
    flags = re.findall(r"--ServerApp\.jpserver_extensions=\S+", script)
    assert flags == ["--ServerApp.jpserver_extensions=course_server=True",
                     "--ServerApp.jpserver_extensions=nbgitpuller=False"], flags
    return flags


@pytest.fixture
def server(tmp_path, monkeypatch):
    import sys

    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret-hub-token")
    monkeypatch.setenv("COURSE_PULL_REPO", REPO)
    (tmp_path / "home").mkdir()
    lab = Lab(tmp_path / "home", tmp_path / "runtime",
              [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--port=0", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.root_dir={tmp_path / 'home'}", *_hub_flags(), "--allow-root"])
    yield lab
    lab.stop()


def _get(lab: Lab, path: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(lab.url + path, headers={"Authorization": f"token {lab.token}"})
    try:
        with opener.open(request, timeout=30) as answer:
            return answer.status, html.unescape(answer.read().decode())
    except urllib.error.HTTPError as exc:
        return exc.code, html.unescape(exc.read().decode())


def test_the_server_refuses_other_pulls_and_its_terminals_lack_the_hub_token(server, tmp_path, report):
    theirs = urlencode({**GOOD, "repo": "git://10.0.0.5/theirs", "targetpath": ".local/share/jupyter/kernels/python3"})
    ui, ui_text = _get(server, f"/git-pull?{theirs}")
    api, api_text = _get(server, f"/git-pull/api?{theirs}")
    legacy, _ = _get(server, f"/git-sync?{theirs}")  # redirects to /git-pull, refused there
    course, course_text = _get(server, f"/git-pull?{urlencode(GOOD)}")
    terminal = terminal_token(server.url, server.token)
    report(f"test_course_server: their link -> page {ui}, API {api}, /git-sync {legacy}; the course's link -> {course}; "
           f"a terminal's token: {terminal}")
    print(re.search(r"This link was refused[^<]*", ui_text).group(0) if "This link" in ui_text else ui_text[-500:])
    assert (ui, api, legacy) == (403, 403, 403), server.log_tail()
    assert "refused by the course" in ui_text and "is not the course's" in ui_text and "refused by the course" in api_text
    assert course == 200 and "git-pull/static/dist/bundle.js" in course_text, course_text[:500]
    assert not (tmp_path / "home" / ".local" / "share" / "jupyter" / "kernels").exists()
    assert terminal == "none", f"a terminal got the hub's token: {terminal}"


# ------------------------------------------------------------------ Open OnDemand's login by POST
def test_the_ood_login_takes_the_token_by_post_from_its_own_site_only(tmp_path):
    """course_server.login: the view's button posts the token (no URL holds it); a post from another
    site, without an Origin, or with a wrong token logs nobody in."""
    import sys

    (tmp_path / "home").mkdir()
    lab = Lab(tmp_path / "home", tmp_path / "runtime",
              [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--port=0", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.root_dir={tmp_path / 'home'}", "--allow-root",
               "--IdentityProvider.login_handler_class=course_server.login.PostedTokenLogin"])

    class Stay(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), Stay)

    def post(token: str, origin: str | None) -> tuple[int, str, str]:
        body = urlencode({"password": token, "next": "/lab/tree/x.ipynb"}).encode()
        request = urllib.request.Request(lab.url + "/login", data=body, method="POST",
                                         headers={"Origin": origin} if origin else {})
        try:
            with opener.open(request, timeout=30) as answer:
                return answer.status, answer.headers.get("Location", ""), answer.headers.get("Set-Cookie", "")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Location", ""), exc.headers.get("Set-Cookie", "") or ""

    try:
        own = post(lab.token, lab.url)
        other = post(lab.token, "https://elsewhere.example.org")
        bare = post(lab.token, None)
        wrong = post("not-the-token", lab.url)
    finally:
        lab.stop()
    print("own site", own[:2], "other site", other[0], "no Origin", bare[0], "wrong token", wrong[0])
    assert own[0] == 302 and own[1] == "/lab/tree/x.ipynb" and "username-" in own[2], own
    assert (other[0], bare[0], wrong[0]) == (403, 403, 401), (other, bare, wrong)
    assert "username-" not in other[2] + bare[2] + wrong[2], "a refused post set a login cookie"
