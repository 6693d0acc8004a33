"""The course's five launchers run outside Slurm on a stand-in checkout, for the tests: slurm/train.sbatch,
slurm/engines.sbatch, slurm/gpucheck.sbatch, the hub's server job (server.sbatch.j2 as rendered) and the
Open OnDemand app's before.sh (rendered by Ruby, sourced as its wrapper does). The stand-in Python
leaves a mark, with the environment it was given."""

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


def checkout_with_venv(where: Path) -> tuple[Path, Path]:
    """A course checkout with the one check, a venv and a stand-in Python that leaves a mark."""
    checkout, mark = where / "checkout", where / "python-ran"
    site = checkout / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (checkout / ".venv" / "bin").mkdir()
    (checkout / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (site / "course.pth").write_text(f"{checkout}\n")
    python = checkout / ".venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\nenv > {mark}\necho http_proxy\n")
    for package in ("helpers", "course_server"):
        (checkout / package).mkdir()
        (checkout / package / "__init__.py").write_text("")
    (checkout / CHECK).parent.mkdir(parents=True)
    shutil.copy(ROOT / CHECK, checkout / CHECK)
    (checkout / "Makefile").write_text(f"gpucheck:\n\ttouch {mark}\n")
    for path in (where, checkout, *checkout.rglob("*")):
        path.chmod(0o755 if path.is_dir() or path == python else 0o644)
    return checkout, mark


def hub_script(checkout: Path, where: Path) -> Path:
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


def ruby() -> str:
    if shutil.which("ruby") is None:
        from helpers.commands.apt import apt_install

        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.skip("ruby is missing and cannot be installed here (needs root and apt-get)")
        assert apt_install("ruby").returncode == 0, "apt-get install ruby failed"
    return shutil.which("ruby")


def ood_before(checkout: Path, where: Path) -> list[str]:
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
    done = subprocess.run([ruby(), str(ROOT / "tests" / "ood" / "render.rb"), "submit", str(app), str(staged),
                           str(where / "values.json")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    stubs = ('host=localhost; clean_up() { exit "$1"; }; find_port() { echo 8888; }; '
             'create_passwd() { echo pw; }; cd "$1"; source ./before.sh; echo "checked: $checkout"')
    return ["bash", "-c", stubs, "bash", str(staged)]


def launch(launcher: str, checkout: Path, where: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURM_SUBMIT_DIR": str(checkout), "SLURM_JOB_ID": "42", "SLURM_NTASKS": "1",
           "COURSE_DATA_DIR": str(where), "COURSE_CONTROLLER_IP": "127.0.0.1", "COURSE_SERVER_IP": "127.0.0.1"}
    for name in ("COURSE_DIR", "COURSE_PYTHON"):
        env.pop(name, None)
    if launcher.endswith(".sbatch"):
        command = ["bash", str(ROOT / "slurm" / launcher)]
    elif launcher == "hub server":
        command = ["bash", str(hub_script(checkout, where))]
    else:
        command = ood_before(checkout, where)
    bin_dir = where / "bin"  # the steps after the check are not what this test is about
    bin_dir.mkdir(exist_ok=True)
    for tool in ("srun", "sleep"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=where,
                          start_new_session=True)
