"""The class link (`python -m helpers class link`): nbgitpuller's query, checked values, one-line errors."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from helpers.errors import CourseError
from helpers.commands.pull_link import pull_link
from tests.conftest import run_cli


def test_the_link_clones_into_the_course_directory_and_opens_the_lesson():
    link = pull_link("https://hub.example.org/", "https://git.example.org/c.git", "v1.2", "03")
    parts = urlsplit(link)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "hub.example.org", "/hub/user-redirect/git-pull")
    assert parse_qs(parts.query) == {"repo": ["https://git.example.org/c.git"], "branch": ["v1.2"],
                                     "urlpath": ["lab/tree/tf-hpc-course/notebooks/03_multiworker_ipyparallel.ipynb"],
                                     "targetpath": ["tf-hpc-course"]}


@pytest.mark.parametrize("hub, repo, branch, lesson, into, says", [
    ("hub.example.org", "r", "main", "00", "c", "not a hub address"),
    ("https://h", "", "main", "00", "c", "--repo"),
    ("https://h", "r", "main", "99", "c", "no single lesson '99'"),
    ("https://h", "r", "main", "0", "c", "no single lesson '0'"),
    ("https://h", "r", "main", "00", "../elsewhere", "one directory name"),
    ("https://h", "r", "main;x", "00", "c", "not a branch name"),
    ("https://h", "https://alice:ghp_secret@git.example.org/c.git", "main", "00", "c", "carries credentials"),
    ("https://h", "https://ghp_secret@git.example.org/c.git", "main", "00", "c", "carries credentials"),
    ("https://h", "ssh://git:pw@git.example.org/c.git", "main", "00", "c", "carries credentials"),
])
def test_bad_values_are_one_line_errors(hub, repo, branch, lesson, into, says):
    with pytest.raises(CourseError, match=says):
        pull_link(hub, repo, branch, lesson, into)


def test_an_ssh_user_is_not_a_credential():
    assert "repo=git%40git.example.org%3Ac.git" in pull_link("https://h", "git@git.example.org:c.git")
    assert "ssh%3A%2F%2Fgit%40git" in pull_link("https://h", "ssh://git@git.example.org/c.git")


def test_the_command_line_prints_the_link_or_one_line():
    done = run_cli("class", "link", "--repo", "https://git.example.org/c.git", "--lesson", "08",
                   env={"COURSE_HUB_URL": "https://hub.example.org"})
    assert done.returncode == 0 and "08_batch_job.ipynb" in done.stdout, done.stderr
    done = run_cli("class", "link", "--repo", "x", env={"COURSE_HUB_URL": ""})
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    done = run_cli("class", "link", env={"COURSE_HUB_URL": "https://hub.example.org",
                                         "COURSE_PULL_REPO": "https://bob:tok@git.example.org/c.git"})
    print(done.stderr.strip())
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "carries credentials" in done.stderr, done.stderr
    assert "tok" not in done.stderr.replace("token", ""), "the error must not repeat the secret"
