"""One check that the course's Python is safe to run, used by all five launchers: slurm/train.sbatch,
slurm/engines.sbatch, slurm/gpucheck.sbatch, the hub's server job and the Open OnDemand app.

Each launcher runs here (outside Slurm, as root) on a stand-in checkout whose venv is then made
writable by others in one place at a time: its pyvenv.cfg, its lib/ or lib/python3.x/, its
site-packages. Every launcher must refuse each one before its Python runs (the stand-in Python
leaves a mark), and run the Python of the checkout untouched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

CHECK = Path("slurm/ood/tf-hpc-course/template/safe_python.sh")
LAUNCHERS = ["train.sbatch", "engines.sbatch", "gpucheck.sbatch", "hub server", "open ondemand"]
PLANTS = {  # where another user could write, and how
    "pyvenv.cfg writable by everyone": (".venv/pyvenv.cfg", lambda p: p.chmod(0o666)),
    "lib/ writable by the group": (".venv/lib", lambda p: p.chmod(0o775)),
    "lib/python3.11/ owned by another user": (".venv/lib/python3.11", lambda p: os.chown(p, 65534, 65534)),
    "site-packages writable by everyone": (".venv/lib/python3.11/site-packages", lambda p: p.chmod(0o777)),
    "a .pth file in site-packages owned by another user":
        (".venv/lib/python3.11/site-packages/course.pth", lambda p: os.chown(p, 65534, 65534)),
}


def _checkout(where: Path) -> tuple[Path, Path]:
    """A course checkout with the one check, a venv and a stand-in Python that leaves a mark."""
    checkout, mark = where / "checkout", where / "python-ran"
    site = checkout / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (checkout / ".venv" / "bin").mkdir()
    (checkout / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (site / "course.pth").write_text(f"{checkout}\n")
    python = checkout / ".venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\ntouch {mark}\necho http_proxy\n")
    for package in ("helpers", "course_server"):
        (checkout / package).mkdir()
        (checkout / package / "__init__.py").write_text("")
    (checkout / CHECK).parent.mkdir(parents=True)
    shutil.copy(ROOT / CHECK, checkout / CHECK)
    (checkout / "Makefile").write_text(f"gpucheck:\n\ttouch {mark}\n")
    for path in (where, checkout, *checkout.rglob("*")):
        path.chmod(0o755 if path.is_dir() or path == python else 0o644)
    return checkout, mark


def _hub_script(checkout: Path, where: Path) -> Path:
    """server.sbatch.j2 as the hub's config and batchspawner render it, for this checkout."""
    import jinja2

    from helpers.environment import PROXY_VARIABLES

    text = ((ROOT / "slurm" / "jupyterhub" / "server.sbatch.j2").read_text()
            .replace("@PROXY_VARIABLES@", " ".join(PROXY_VARIABLES)).replace("@COURSE_DIR@", str(checkout))
            .replace("@INSTALL_UID@", "0"))
    script = where / "server.sbatch"
    script.write_text(jinja2.Template(text).render(homedir=str(where), keepvars="PATH", prologue="", epilogue="",
                                                   srun="", cmd=str(checkout / ".venv" / "bin" / "python")))
    return script


def _ruby() -> str:
    if shutil.which("ruby") is None:
        from helpers.tools.apt import apt_install

        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.skip("ruby is missing and cannot be installed here (needs root and apt-get)")
        assert apt_install("ruby").returncode == 0, "apt-get install ruby failed"
    return shutil.which("ruby")


def _ood_before(checkout: Path, where: Path) -> list[str]:
    """The app's before.sh, rendered by Ruby as Open OnDemand renders it, sourced as its wrapper does."""
    import yaml

    app = ROOT / "slurm" / "ood" / "tf-hpc-course"
    form = yaml.safe_load((app / "form.yml").read_text())
    values = {name: str(spec.get("value", "")) for name, spec in form["attributes"].items()}
    values.update(cluster=form["cluster"], course_lesson="03_multiworker_ipyparallel.ipynb",
                  course_python=str(checkout / ".venv" / "bin" / "python"))
    (where / "values.json").write_text(json.dumps(values))
    staged = where / "staged"
    shutil.rmtree(staged, ignore_errors=True)
    done = subprocess.run([_ruby(), str(ROOT / "tests" / "ood" / "render.rb"), "submit", str(app), str(staged),
                           str(where / "values.json")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    stubs = ('host=localhost; clean_up() { exit "$1"; }; find_port() { echo 8888; }; '
             'create_passwd() { echo pw; }; cd "$1"; source ./before.sh; echo "checked: $checkout"')
    return ["bash", "-c", stubs, "bash", str(staged)]


def _launch(launcher: str, checkout: Path, where: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURM_SUBMIT_DIR": str(checkout), "SLURM_JOB_ID": "42", "SLURM_NTASKS": "1",
           "COURSE_DATA_DIR": str(where), "COURSE_CONTROLLER_IP": "127.0.0.1", "COURSE_SERVER_IP": "127.0.0.1"}
    for name in ("COURSE_DIR", "COURSE_PYTHON"):
        env.pop(name, None)
    if launcher.endswith(".sbatch"):
        command = ["bash", str(ROOT / "slurm" / launcher)]
    elif launcher == "hub server":
        command = ["bash", str(_hub_script(checkout, where))]
    else:
        command = _ood_before(checkout, where)
    bin_dir = where / "bin"  # the steps after the check are not what this test is about
    bin_dir.mkdir(exist_ok=True)
    for tool in ("srun", "sleep"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=where,
                          start_new_session=True)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_launcher_runs_a_python_nobody_else_could_change(tmp_path, launcher):
    checkout, mark = _checkout(tmp_path)
    _launch(launcher, checkout, tmp_path)
    assert mark.exists(), f"{launcher} did not run the checkout's own Python"


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("plant", list(PLANTS))
def test_every_launcher_refuses_a_venv_others_could_write_to(tmp_path, launcher, plant, report):
    if os.geteuid() != 0:
        pytest.skip("files of another user need root")
    checkout, mark = _checkout(tmp_path)
    where, change = PLANTS[plant]
    change(checkout / where)
    done = _launch(launcher, checkout, tmp_path)
    said = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "(nothing)"
    assert done.returncode == 2 and f"error: {checkout / where} belongs to uid" in said, (done.stdout, done.stderr)
    assert not mark.exists(), f"{launcher} ran the Python of a venv with {plant}"
    if launcher == LAUNCHERS[0] and plant == list(PLANTS)[0]:
        report(f"test_safe_python: {said}")


def test_the_check_fails_closed_on_a_course_account_that_is_not_a_uid(tmp_path):
    """A uid the hub failed to fill in (`@INSTALL_UID@` left as it is) would make find fail, and a
    find that finds nothing would pass: the check refuses instead."""
    checkout, mark = _checkout(tmp_path)
    done = subprocess.run(["bash", "-c", f'source {ROOT / CHECK}; COURSE_TRUSTED_UID=@INSTALL_UID@ '
                           f'course_python_check {checkout}/.venv/bin/python {checkout}'],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "COURSE_TRUSTED_UID=@INSTALL_UID@ is not a uid" in done.stderr, done.stderr
