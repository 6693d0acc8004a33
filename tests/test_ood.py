"""The course's Open OnDemand app (slurm/ood/tf-hpc-course), as far as it can run without Open
OnDemand (which cannot be installed here). Root, the local Slurm, Ruby and Chromium; CI requires them.

What runs for real: Ruby renders the app's ERB templates with the values the form sends, and
ood_core's own batch-connect template (tests/ood/lib, unchanged) wraps them into the job script;
the script is submitted to the local Slurm as a learner, with the options Open OnDemand's Slurm
adapter adds (`--export`, `--output`, `--chdir`, `--time`); the job pulls the course from its
repository, starts JupyterLab and writes connection.yml; the view Open OnDemand would show is
rendered from it, and Chromium follows its button into JupyterLab, where the lesson is open and
its `%%px` cells run on engines that are a step of the same job on two nodes.
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
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from helpers.engines.slurm import node_address
from helpers.tools.course_run import lessons
from tests.conftest import ROOT, squeue_empty
from tests.hub_support import served_course, unix_learners
from tests.test_browser import CHROMIUM_ARGS, SCREENSHOTS, ensure_chromium, wait_kernel_idle

pytestmark = pytest.mark.slurm
APP = ROOT / "slurm" / "ood" / "tf-hpc-course"
RENDER = ROOT / "tests" / "ood" / "render.rb"
LESSON = "03_multiworker_ipyparallel.ipynb"
PROOF = "trained on disjoint data, and hold identical weights"


def ensure_ruby() -> str:
    """Debian's Ruby, installed with apt when missing and we are root."""
    if shutil.which("ruby") is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            if os.environ.get("CI"):
                pytest.fail("the Open OnDemand test must run in CI: ruby is missing and cannot be installed")
            pytest.skip("ruby is missing and cannot be installed here (needs root and apt-get)")
        subprocess.run("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ruby",
                       shell=True, check=True, capture_output=True, timeout=900)
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


def _outputs(notebook: Path) -> str:
    import nbformat

    cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code" and c.execution_count]
    return "\n".join(f"[{c.execution_count}] " + " | ".join((o.get("text") or o.get("evalue") or "")[-300:]
                                                           for o in c.outputs) for c in cells)


class _Form(HTMLParser):
    def __init__(self):
        super().__init__()
        self.action, self.fields = None, {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.action = attrs["action"]
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
            assert form.action == f"/node/{connect['host']}/{connect['port']}/{connect['lesson_url']}", form.action
            address = node_address(str(connect["host"]))
            url = f"http://{address}:{connect['port']}{form.action}?token={form.fields['token']}"
            base = f"http://{address}:{connect['port']}/node/{connect['host']}/{connect['port']}"
            cloned = sorted(p.name for p in (home / "tf-hpc-course" / "notebooks").glob("*.ipynb"))
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                t = time.monotonic()
                page.goto(url)
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
                page.wait_for_selector(f".lm-TabBar-tab:has-text('{LESSON}')", timeout=30_000)
                wait_kernel_idle(page, base, 120, form.fields["token"])
                timings["the view's button to the lesson open"] = time.monotonic() - t
                t = time.monotonic()
                page.click("text=Run", timeout=10_000)
                page.click("text=Run All Cells", timeout=10_000)
                try:
                    page.wait_for_selector(f".jp-OutputArea-output:has-text('{PROOF}')", timeout=int(os.environ.get("OOD_PROOF_MS", "300000")))
                except Exception:
                    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(SCREENSHOTS / "ood-app-lesson-03-failed.png"))
                    page.keyboard.press("Control+s")  # the notebook on disk has every cell's output
                    page.wait_for_timeout(2000)
                    raise AssertionError("lesson 03 did not reach its proof; its outputs:\n"
                                         + _outputs(home / "tf-hpc-course" / "notebooks" / LESSON)) from None
                timings["lesson 03 run, engines a step of the job"] = time.monotonic() - t
                hosts = page.locator(".jp-OutputArea-output", has_text="'host': 'node2'").count()
                page.locator(".jp-OutputArea-output", has_text=PROOF).first.scroll_into_view_if_needed()
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
    report(f"{Path(__file__).stem}: " + "; ".join(f"{k} {v:.1f} s" for k, v in timings.items()) + f"; screenshot {shot}")
    assert cloned == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")), cloned
    assert hosts >= 1, "an engine should have run on node2"
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
    for bad in ({"course_epochs": "2; id"}, {"course_max_steps": "0"}, {"course_job_gpus_per_task": "9"},
                {"course_class_layout": "gpu$(id)"}, {"course_epochs": "$(touch x)"}):
        values.write_text(json.dumps(form_values(**bad)))
        done = render(ruby, "submit", str(APP), str(tmp_path / "bad"), str(values))
        assert done.returncode != 0 and "ArgumentError" in done.stderr, (bad, done.stderr[-300:])
