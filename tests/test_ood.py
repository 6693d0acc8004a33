"""The course's Open OnDemand app (slurm/ood/tf-hpc-course), as far as it can run without Open
OnDemand (which cannot be installed here). Root, the local Slurm, Ruby and Chromium; CI requires them.

What runs for real: Ruby renders the app's ERB templates with the values the form sends, and
ood_core's own batch-connect template (tests/ood/lib, unchanged) wraps them into the job script;
the script is submitted to the local Slurm as a learner, with the options Open OnDemand's Slurm
adapter adds (`--export`, `--output`, `--chdir`, `--time`); the job pulls the course from its
repository, starts JupyterLab and writes connection.yml; the view Open OnDemand would show is
rendered from it, and Chromium follows its button into JupyterLab, where the lesson is open and
its start-up (its cells up to the strategy, tests/support/lesson_probe.py) runs on engines that are a step of the
same job on two nodes: the two workers form one cluster. The lesson runs whole on Slurm engines in
test_lessons_in_class_layouts.
What does not: Open OnDemand's dashboard, its reverse proxy (`/node/HOST/PORT/`: the browser goes
to the node directly, at the base URL the proxy would forward) and its login.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest
import yaml

from helpers.slurm.nodes import node_address
from helpers.commands.course_run import lessons
from helpers.commands.apt import apt_install
from tests.support.required import unavailable
from tests.conftest import ROOT, squeue_empty
from tests.support.hub import git, git_repository, served_course, unix_learners
from tests.support.lesson_probe import startup_end
from tests.support.browser import CHROMIUM_ARGS, SCREENSHOTS, ensure_chromium, wait_kernel_idle

pytestmark = pytest.mark.slurm
APP = ROOT / "slurm" / "ood" / "tf-hpc-course"
RENDER = ROOT / "tests" / "ood" / "render.rb"
LESSON = "03_multiworker_ipyparallel.ipynb"
IN_SYNC = "2 replicas in sync"  # what each worker's strategy prints, the last cell of the lesson's start-up


def ensure_ruby() -> str:
    """Debian's Ruby, installed with apt when missing and we are root."""
    if shutil.which("ruby") is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            if os.environ.get("CI"):
                pytest.fail("the Open OnDemand test must run in CI: ruby is missing and cannot be installed")
            pytest.skip("ruby is missing and cannot be installed here (needs root and apt-get)")
        done = apt_install("ruby")
        assert done.returncode == 0, f"apt-get install ruby failed: {done.stderr[-500:]}"
    return shutil.which("ruby")


def form_values(**changes: str) -> dict:
    """What the app's form sends: its defaults, with the centre's and the learner's choices."""
    form = yaml.safe_load((APP / "form.yml").read_text())
    values = {name: str(spec.get("value", "")) for name, spec in form["attributes"].items()}
    values.update({"cluster": form["cluster"], "course_lesson": LESSON, **changes})
    return values


def render(ruby: str, *args: str, user: str | None = None) -> subprocess.CompletedProcess:
    prefix = ["runuser", "-u", user, "--"] if user else []
    return subprocess.run([*prefix, ruby, str(RENDER), *args], capture_output=True, text=True, timeout=60)


def test_the_form_offers_every_lesson_and_refuses_what_is_not_a_number(tmp_path):
    ruby = ensure_ruby()
    form = yaml.safe_load((APP / "form.yml").read_text())
    offered = [option[1] for option in form["attributes"]["course_lesson"]["options"]]
    assert offered == [p.name for p in lessons()]
    assert form["form"] == list(form["attributes"]), "every attribute is on the form, in order"
    for bad in ({"bc_num_nodes": "2; rm -rf ~"}, {"reservation": "class$(id)"}, {"course_lesson": "../../x.sh"},
                {"course_mode": "quick; id"}):
        values = tmp_path / "values.json"
        values.write_text(json.dumps(form_values(**bad)))
        done = render(ruby, "submit", str(APP), str(tmp_path / "staged"), str(values))
        assert done.returncode != 0 and "ArgumentError" in done.stderr, (bad, done.stdout, done.stderr[-500:])
    values.write_text(json.dumps(form_values(course_python="/x/$(touch pwned)/bin/python")))
    done = render(ruby, "submit", str(APP), str(tmp_path / "quoted"), str(values))
    assert done.returncode == 0, done.stderr
    before = (tmp_path / "quoted" / "before.sh").read_text()
    assert "export COURSE_PYTHON=/x/\\$\\(touch\\ pwned\\)/bin/python" in before, before
    for name in ("before.sh", "script.sh", "after.sh", "job_script_content.sh"):
        assert subprocess.run(["bash", "-n", str(tmp_path / "quoted" / name)]).returncode == 0, name


LIMITED = ("bc_num_hours", "bc_num_nodes", "tasks_per_node", "gpus_per_task")


def _submit(ruby: str, tmp_path: Path, **values: str) -> subprocess.CompletedProcess:
    file = tmp_path / "values.json"
    file.write_text(json.dumps(form_values(**values)))
    return render(ruby, "submit", str(APP), str(tmp_path / "staged"), str(file))


def test_the_server_side_limits_are_the_forms(tmp_path, report):
    """A browser can send any value: submit.yml.erb refuses what the form would not offer."""
    ruby = ensure_ruby()
    form = yaml.safe_load((APP / "form.yml").read_text())["attributes"]
    seen = []
    for name in LIMITED:
        low, high = form[name]["min"], form[name]["max"]
        for value, accepted in ((low, True), (high, True), (low - 1, False), (high + 1, False)):
            done = _submit(ruby, tmp_path, **{name: str(value)})
            assert (done.returncode == 0) == accepted, (name, value, done.stderr[-300:])
            if not accepted:
                assert "ArgumentError" in done.stderr and f"from {low} to {high}" in done.stderr, done.stderr[-300:]
        seen.append(f"{name} {low}-{high}")
    native = json.loads(_submit(ruby, tmp_path, bc_num_nodes="4", tasks_per_node="8", gpus_per_task="1").stdout)["native"]
    report(f"test_ood: server-side limits equal the form's ({', '.join(seen)}); at the form's maximum: {' '.join(native)}")
    assert native[:5] == ["--nodes", "4", "--ntasks-per-node", "8", "--exclusive"], native


@pytest.mark.parametrize("repo, refused", [
    ("https://alice:ghp_secret@git.example.org/c.git", True),
    ("https://ghp_secret@git.example.org/c.git", True),
    ("ssh://git:pw@git.example.org/c.git", True),
    ("ssh://git@git.example.org/c.git", False),
    ("git@git.example.org:c.git", False),
    ("https://git.example.org/c.git", False),
])
def test_a_repository_url_with_credentials_is_refused(tmp_path, repo, refused):
    done = _submit(ensure_ruby(), tmp_path, course_repo=repo)
    assert (done.returncode != 0) == refused, done.stderr[-300:]
    if refused:
        assert "carries credentials" in done.stderr and "ghp_secret" not in done.stderr.split("(")[0], done.stderr[-300:]


def _fake_venv(root: Path, checkout: Path) -> Path:
    """A venv of Debian's Python whose site-packages points at `checkout` (as an editable install does)."""
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to("/usr/bin/python3")
    (root / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    (site / "course.pth").write_text(f"{checkout}\n")
    for package in ("helpers", "course_server"):
        (checkout / package).mkdir(parents=True)
        (checkout / package / "__init__.py").write_text("")
    for path in (root, checkout, *root.rglob("*"), *checkout.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    return root / "bin" / "python"


def _before(ruby: str, tmp_path: Path, python: Path) -> subprocess.CompletedProcess:
    staged = tmp_path / "staged"
    shutil.rmtree(staged, ignore_errors=True)
    done = _submit(ruby, tmp_path, course_python=str(python))
    assert done.returncode == 0, done.stderr
    stubs = ('host=localhost; clean_up() { exit "$1"; }; find_port() { echo 8888; }; '
             'create_passwd() { echo pw; }; cd "$1"; source ./before.sh; echo "checked: $checkout"')
    return subprocess.run(["bash", "-c", stubs, "bash", str(staged)], capture_output=True, text=True, timeout=120)


def test_the_course_python_its_site_packages_and_its_checkout_must_be_yours_or_roots(tmp_path, report):
    if not Path("/usr/bin/python3").exists():
        unavailable("needs Debian's /usr/bin/python3 for a stand-in venv", "COURSE_REQUIRE_SLURM")
    ruby = ensure_ruby()
    venv, checkout = tmp_path / "venv", tmp_path / "checkout"
    python = _fake_venv(venv, checkout)
    site = venv / "lib" / "python3.11" / "site-packages"
    good = _before(ruby, tmp_path, python)
    assert good.returncode == 0 and f"checked: {checkout}" in good.stdout, good.stderr[-500:]
    planted = {
        "a group-writable file in site-packages": (site / "course.pth", lambda p: p.chmod(0o664)),
        "a world-writable package directory in site-packages": (site / "pkg", lambda p: (p.mkdir(), p.chmod(0o777))),
        "site-packages owned by another user": (site, lambda p: os.chown(p, 65534, 65534)),
        "a world-writable module in the checkout": (checkout / "helpers" / "__init__.py", lambda p: p.chmod(0o666)),
        "the checkout owned by another user": (checkout, lambda p: os.chown(p, 65534, 65534)),
    }
    lines = []
    for what, (path, plant) in planted.items():
        plant(path)
        done = _before(ruby, tmp_path, python)
        line = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "(nothing)"
        lines.append(f"{what}: exit {done.returncode}")
        assert done.returncode == 2 and f"error: {path} belongs to uid" in line, (what, done.stdout, done.stderr)
        if path.is_dir():
            os.chown(path, 0, 0)
            path.chmod(0o755)
        else:
            path.chmod(0o644)
    print(line)
    report("test_ood: before.sh refuses " + "; ".join(lines))


def _outputs(notebook: Path) -> str:
    import nbformat

    cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code" and c.execution_count]
    return "\n".join(f"[{c.execution_count}] " + " | ".join((o.get("text") or o.get("evalue") or "")[-300:]
                                                           for o in c.outputs) for c in cells)


class _Form(HTMLParser):
    def __init__(self):
        super().__init__()
        self.action, self.method, self.fields = None, None, {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.action, self.method = attrs["action"], attrs.get("method", "get").lower()
        elif tag == "input":
            self.fields[attrs["name"]] = attrs["value"]


def test_the_app_starts_jupyterlab_as_a_slurm_job_and_runs_a_lesson_on_its_engines(slurm, tmp_path, report):
    ruby, executable = ensure_ruby(), ensure_chromium()
    from playwright.sync_api import sync_playwright

    timings = {}
    with served_course(tmp_path / "served") as course, unix_learners(1, prefix="ood") as (learner,):
        user, home = learner["name"], learner["home"]
        staged = home / "ondemand" / "data" / "sys" / "dashboard" / "batch_connect" / "sys" / "tf-hpc-course" / \
            "output" / "session-1"
        staged.mkdir(parents=True)
        values = staged.parent / "values.json"
        values.write_text(json.dumps(form_values(course_repo=course["url"], course_python=sys.executable,
                                                 course_mode="quick", course_data_dir="",  # synthetic data
                                                 bc_num_nodes="2", tasks_per_node="1",
                                                 bc_num_hours="1")))
        subprocess.run(["chown", "-R", f"{user}:{user}", str(home / "ondemand")], check=True)
        done = render(ruby, "submit", str(APP), str(staged), str(values), user=user)
        assert done.returncode == 0, done.stderr[-2000:]
        submit = json.loads(done.stdout)
        # as Open OnDemand's Slurm adapter submits it: the #! line from shell_path, -D, -J, -o, -t,
        # --export with the job's environment (SLURM_CONF: this local Slurm's only), then native
        script = Path(submit["script"])
        script.write_text(f"#!{submit['shell_path']}\n" + script.read_text())
        sbatch = ["sbatch", "--parsable", "-D", str(staged), "-J", "ood-tf-hpc-course", "-o", f"{staged}/output.log",
                  "-t", "01:00:00", "--export", "SLURM_CONF", *submit["native"], str(script)]
        started = time.monotonic()
        sent = subprocess.run(["runuser", "-u", user, "--", *sbatch], env=slurm["env"], capture_output=True,
                              text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr
        job = sent.stdout.strip().split(";")[0]
        try:
            connection = staged / "connection.yml"
            deadline = time.monotonic() + 240
            while not connection.exists():
                log = (staged / "output.log").read_text() if (staged / "output.log").exists() else ""
                assert time.monotonic() < deadline, f"no connection.yml within 240 s:\n{log[-3000:]}"
                time.sleep(0.5)
            timings["job submitted to JupyterLab up (course cloned)"] = time.monotonic() - started
            connect = yaml.safe_load(connection.read_text())
            view = render(ruby, "view", str(APP), str(connection), user=user)
            assert view.returncode == 0, view.stderr
            form = _Form()
            form.feed(view.stdout)
            base = f"/node/{connect['host']}/{connect['port']}"
            assert (form.action, form.method, form.fields["next"]) == (f"{base}/login", "post",
                                                                      f"{base}/{connect['lesson_url']}"), form.fields
            address = node_address(str(connect["host"]))
            origin = f"http://{address}:{connect['port']}"
            # the card as Open OnDemand would show it, on the same site as its /node/ proxy
            card = f"{origin}/pun/sys/dashboard/batch_connect/sessions"
            token = form.fields["password"]
            base = origin + base
            cloned = sorted(p.name for p in (home / "tf-hpc-course" / "notebooks").glob("*.ipynb"))
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                urls = []
                context.on("request", lambda request: urls.append(request.url))
                context.route(card, lambda route: route.fulfill(status=200, content_type="text/html",
                                                               body=view.stdout))
                card_page = context.new_page()
                card_page.goto(card)
                t = time.monotonic()
                with context.expect_page() as opened:  # the button opens JupyterLab in a new tab
                    card_page.click("button[type=submit]")
                page = opened.value
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
                page.wait_for_selector(f".lm-TabBar-tab:has-text('{LESSON}')", timeout=30_000)
                wait_kernel_idle(page, base, 120, token)
                in_urls = [u for u in urls if token in u]
                timings["the view's button to the lesson open"] = time.monotonic() - t
                t = time.monotonic()
                page.locator(".jp-Notebook .jp-Cell").nth(startup_end()).click()  # the first cell after it
                page.click("text=Run", timeout=10_000)
                page.click("text=Run All Above Selected Cell", timeout=10_000)
                try:
                    page.wait_for_selector(f".jp-OutputArea-output:has-text('{IN_SYNC}')", timeout=int(os.environ.get("OOD_PROOF_MS", "300000")))
                    wait_kernel_idle(page, base, 60, token)  # the other engine's line too
                except Exception:
                    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(SCREENSHOTS / "ood-app-lesson-03-failed.png"))
                    page.keyboard.press("Control+s")  # the notebook on disk has every cell's output
                    page.wait_for_timeout(2000)
                    raise AssertionError("lesson 03's start-up did not make its strategy; its outputs:\n"
                                         + _outputs(home / "tf-hpc-course" / "notebooks" / LESSON)) from None
                timings["lesson 03's start-up (to its strategy), engines a step of the job"] = time.monotonic() - t
                outputs = "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())
                hosts = page.locator(".jp-OutputArea-output", has_text="'host': 'node2'").count()
                page.locator(".jp-OutputArea-output", has_text=IN_SYNC).first.scroll_into_view_if_needed()
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                shot = SCREENSHOTS / "ood-app-lesson-03.png"
                page.screenshot(path=str(shot))
                browser.close()
            config = (staged / "jupyter_config.py").read_text()
            mode = (staged / "jupyter_config.py").stat().st_mode & 0o777
        except Exception as exc:
            log = (staged / "output.log").read_text() if (staged / "output.log").exists() else "no output.log"
            raise AssertionError(f"{exc}\n--- the job's output.log\n{log[-4000:]}") from None
        finally:
            subprocess.run(["scancel", job], env=slurm["env"], timeout=30)
        assert squeue_empty(slurm["env"], within=60), "the app's job must end when cancelled"
    report(f"{Path(__file__).stem}: " + "; ".join(f"{k} {v:.1f} s" for k, v in timings.items())
           + f"; the token posted, in {len(in_urls)} of {len(urls)} request URLs; screenshot {shot}")
    assert cloned == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")), cloned
    assert hosts >= 1, "an engine should have run on node2"
    assert outputs.count(IN_SYNC) == 2, f"both workers' strategies should count 2 replicas in sync:\n{outputs[-3000:]}"
    assert urls and not in_urls, f"the session's token was in a URL: {in_urls[:3]}"
    assert mode & 0o077 == 0, f"the JupyterLab config holds the token and is readable by others: {oct(mode)}"
    assert re.search(r"c\.ServerApp\.ip = '10\.77\.0\.\d+'", config), "JupyterLab must listen on the node's address only"
    assert "c.KernelManager.transport = 'ipc'" in config


def test_the_class_settings_and_layout_reach_the_job(tmp_path):
    """Every class-wide setting (helpers.class_settings) is a form value of the same name, checked,
    quoted and exported for the job's kernels and engines; the layout picks the job's request."""
    from helpers.class_settings import CLASS_SETTINGS

    ruby = ensure_ruby()
    form = yaml.safe_load((APP / "form.yml").read_text())
    assert {name.lower() for name in CLASS_SETTINGS} <= set(form["attributes"]), "a class setting is not on the form"
    values = tmp_path / "values.json"

    def submitted(name: str, **changes: str) -> tuple[list[str], str]:
        values.write_text(json.dumps(form_values(**changes)))
        done = render(ruby, "submit", str(APP), str(tmp_path / name), str(values))
        assert done.returncode == 0, done.stderr[-1000:]
        return json.loads(done.stdout)["native"], (tmp_path / name / "before.sh").read_text()

    native, before = submitted("node", course_mode="workshop", course_epochs="2", course_max_steps="40",
                               course_job_gpus_per_task="1", gpus_per_task="1", tasks_per_node="4")
    assert native == ["--nodes", "1", "--ntasks-per-node", "4", "--exclusive", "--gpus-per-task", "1"], native
    for line in ("export COURSE_MODE=workshop", "export COURSE_EPOCHS=2", "export COURSE_MAX_STEPS=40",
                 "export COURSE_JOB_GPUS_PER_TASK=1", "export COURSE_CLASS_LAYOUT=node",
                 "export TF_FORCE_GPU_ALLOW_GROWTH=true"):
        assert line in before.splitlines(), (line, before)
    native, before = submitted("gpu", course_class_layout="gpu", bc_num_nodes="3", gpus_per_task="1")
    assert native == ["--nodes", "1", "--ntasks", "2", "--gpus", "1"], native  # one GPU of a shared node
    assert "export COURSE_CLASS_LAYOUT=gpu" in before.splitlines() and "COURSE_EPOCHS" not in before
    assert subprocess.run(["bash", "-n", str(tmp_path / "gpu" / "before.sh")]).returncode == 0
    for bad in ({"course_epochs": "2; id"}, {"course_max_steps": "0"}, {"course_job_gpus_per_task": "65"},
                {"course_class_layout": "gpu$(id)"}, {"course_epochs": "$(touch x)"}):
        values.write_text(json.dumps(form_values(**bad)))
        done = render(ruby, "submit", str(APP), str(tmp_path / "bad"), str(values))
        assert done.returncode != 0 and "ArgumentError" in done.stderr, (bad, done.stderr[-300:])


# ------------------------------------------------------------------ pull links into the app's JupyterLab
KERNEL_SPECS = ".local/share/jupyter/kernels/python3"


def _http(url: str, token: str) -> tuple[int, str]:
    """GET `url` with the session's token (never through a web proxy): status and body."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        with opener.open(request, timeout=120) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def test_the_apps_jupyterlab_pulls_only_the_course(tmp_path, report):
    """Fourth review, finding 1: the venv enables nbgitpuller (its jupyter_server_config.d), and the
    app's JupyterLab config said nothing about it, so a link someone else sent cloned their
    repository into the kernel specs. Here ood_core's own job script (rendered from the app, run
    directly: no Slurm needed) clones the course and starts JupyterLab; their links get 403 or
    404, the course's link pulls the trainer's update."""
    ruby = ensure_ruby()
    home, served = tmp_path / "home", tmp_path / "served"
    home.mkdir()
    course, theirs = served / "course", served / "theirs"
    git_repository(course, {"README.md": "the course\n", "notebooks/00_start.ipynb": "{}\n"})
    planted = {"argv": ["sh", "-c", "touch $HOME/planted-kernel-ran"], "display_name": "Python 3", "language": "python"}
    git_repository(theirs, {"kernel.json": json.dumps(planted)})
    done = _submit(ruby, tmp_path, course_repo=str(course), course_ref="main", course_python=sys.executable)
    assert done.returncode == 0, done.stderr[-1000:]
    staged = tmp_path / "staged"
    config_dir = tmp_path / "jupyter-config"  # root may run JupyterLab only when told (the job runs as a learner)
    config_dir.mkdir()
    (config_dir / "jupyter_config.py").write_text("c.ServerApp.allow_root = True\n")
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp_path), "JUPYTER_CONFIG_DIR": str(config_dir),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    for name in ("COURSE_PULL_REPO", "COURSE_PULL_BRANCH", "COURSE_PULL_DIR"):
        env.pop(name, None)
    log_path = staged / "output.log"
    with open(log_path, "w") as log:
        job = subprocess.Popen(["bash", str(staged / "job_script_content.sh")], cwd=staged, env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        connection, deadline = staged / "connection.yml", time.monotonic() + 120
        while True:
            up = connection.exists() and "JupyterLab listens on port" in log_path.read_text()
            if up:
                break
            assert job.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.3)
        connect = yaml.safe_load(connection.read_text())
        address = re.search(r"c\.ServerApp\.ip = '([^']+)'", (staged / "jupyter_config.py").read_text()).group(1)
        base = f"http://{address}:{connect['port']}/node/{connect['host']}/{connect['port']}"
        token = str(connect["password"])

        def pull(api: bool, **query: str) -> tuple[int, str]:
            return _http(f"{base}/git-pull{'/api' if api else ''}?{urlencode(query)}", token)

        plant = {"repo": str(theirs), "branch": "main", "targetpath": KERNEL_SPECS}
        answers = {
            "their repository into the kernel specs, by the API": pull(True, **plant),
            "the same, by nbgitpuller's page": pull(False, **plant, urlpath="lab"),
            "the course into the home itself (targetpath= and targetPath=)":
                pull(True, repo=str(course), branch="main", targetpath="", targetPath="tf-hpc-course"),
            "the course through targetPath": pull(True, repo=str(course), branch="main", targetPath="tf-hpc-course"),
        }
        git_repository_update = course / "update.md"
        git_repository_update.write_text("the trainer's update\n")
        git("add", ".", cwd=course)
        git("commit", "-q", "-m", "an update", cwd=course)
        own_page = pull(False, repo=str(course), branch="main", targetpath="tf-hpc-course",
                        urlpath="lab/tree/tf-hpc-course/notebooks/00_start.ipynb")
        own_api = pull(True, repo=str(course), branch="main", targetpath="tf-hpc-course")
    finally:
        os.killpg(job.pid, 9)
        job.wait(timeout=30)
    lines = [f"{what}: {status}" for what, (status, _) in answers.items()]
    report("test_ood: the app's JupyterLab, pull links: " + "; ".join(lines)
           + f"; the course's link: page {own_page[0]}, API {own_api[0]}")
    print("\n".join(lines), "\ncourse link:", own_page[0], own_api[0], own_api[1][-200:])
    assert not (home / KERNEL_SPECS).exists(), f"their repository was cloned into {KERNEL_SPECS}"
    assert not (home / ".git").exists(), "the course was pulled into the home itself"
    for what, (status, body) in answers.items():
        assert status in (403, 404), (what, status, body[-500:])
    assert own_page[0] == 200 and "git-pull/static/dist/bundle.js" in own_page[1], own_page[1][-500:]
    assert own_api[0] == 200 and '"finished"' in own_api[1], own_api[1][-1000:]
    assert (home / "tf-hpc-course" / "update.md").read_text() == "the trainer's update\n"
