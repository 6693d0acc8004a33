"""Lesson 17's module and the venv on top of it, run as the notebook writes them (Lmod, no Slurm).

The modulefile and the job script come from the notebook's own cells; the job script runs in a
login shell (`bash -l`, as the notebook does where there is Lmod but no Slurm). The module hands
its packages out through `EBPYTHONPREFIXES` (as EasyBuild 5's modules do when the centre prefers it,
`--prefer-python-search-path=EBPYTHONPREFIXES`, or for a package built for several Pythons, and, from
easybuild-easyblocks 5.2.0 on, for a Python package whose installation holds a `.pth` file:
`should_use_ebpythonprefixes` in its `generic/pythonpackage.py`; EasyBuild's default is still `PYTHONPATH`)
and the venv reads them through a `.pth` file; the same run with a module on `PYTHONPATH` shows what that
avoids.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from helpers.commands.apt import apt_install
from tests.support.required import unavailable
from tests.support.notebooks import written_programs

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "17_software_stack.ipynb"
LMOD = Path("/usr/share/lmod/lmod/init/bash")
OLD_LINE = f'prepend_path("PYTHONPATH", "{sysconfig.get_paths()["purelib"]}")'  # a module on PYTHONPATH (EasyBuild's default)


def _cell(marker: str) -> str:  # the code cell holding `marker`
    return next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                if c.cell_type == "code" and marker in c.source)


def _lmod() -> None:
    if LMOD.exists():
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        unavailable("Lmod is not installed and cannot be installed here (needs root and apt-get)", "COURSE_REQUIRE_SLURM")
    done = apt_install("lmod", timeout=600)
    assert done.returncode == 0 and LMOD.exists(), done.stderr[-2000:]


def _system_python(why: str) -> None:
    """Debian's /usr/bin/python3 (CI as root has it: .ci/run makes the venv with it)."""
    if not os.access("/usr/bin/python3", os.X_OK):
        unavailable(f"no /usr/bin/python3: {why}", "COURSE_REQUIRE_SLURM")


READER_LOOP = """for prefix in os.environ.get("EBPYTHONPREFIXES", "").split(os.pathsep):
    sitedir = os.path.join(prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    if prefix and os.path.isdir(sitedir):  # as EasyBuild's: a prefix without one adds nothing
        site.addsitedir(sitedir)
"""


def _run_stack(job_dir: Path, handed_out_by: str, reader: str | None = None, edits: tuple = (),
               extra_env: dict | None = None, module_edits: tuple = (), need_stack: bool = True) -> tuple[dict, dict | None, str]:
    """The notebook's modulefile (or one on PYTHONPATH; each (old, new) of `module_edits` replaced), its extras and
    stack.sbatch (its .pth reader's loop replaced by `reader` if given, each (old, new) of `edits` replaced), run in a
    login shell started with the lesson's PATH for the job and `extra_env` on top of this environment. Without
    `need_stack`, a job that reports no STACK line is let through."""
    namespace = {"job_dir": job_dir, "sys": sys, "os": os, "print": lambda *a: None}
    exec(_cell('modulefiles = job_dir / "modulefiles"'), namespace)
    modulefile: Path = namespace["modulefile"]
    text = modulefile.read_text()
    assert "PYTHONPATH" not in text.replace("not PYTHONPATH", ""), text
    if handed_out_by == "PYTHONPATH":
        lines = [OLD_LINE if "EBPYTHONPREFIXES" in line else line for line in text.splitlines()]
        modulefile.write_text("\n".join(lines) + "\n")
    for old, new in module_edits:
        assert old in modulefile.read_text(), f"the modulefile no longer holds {old!r}"
        modulefile.write_text(modulefile.read_text().replace(old, new))
    exec(_cell('extras = job_dir / "extras"'), namespace)
    exec(_cell("settings_env = "), namespace)  # the lesson's settings for the job: its PATH
    script = job_dir / "stack.sbatch"
    script.write_text(next(text for name, text in written_programs("17_software_stack.ipynb").items()
                           if name.endswith('"stack.sbatch"}')))
    if reader is not None:
        assert READER_LOOP in script.read_text(), "the job script's .pth reader changed"
        script.write_text(script.read_text().replace(READER_LOOP, reader))
    for old, new in edits:
        assert old in script.read_text(), f"the job script no longer holds {old!r}"
        script.write_text(script.read_text().replace(old, new))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EBPYTHONPREFIXES", "VIRTUAL_ENV")}
    done = subprocess.run(["bash", "-l", str(script)], cwd=job_dir, capture_output=True, text=True, timeout=600,
                          env={**env, "PATH": namespace["settings_env"].get("PATH", env["PATH"]),
                               "MODULES": str(job_dir / "modulefiles"), "VENV": str(job_dir / "venv"),
                               "EXTRAS": str(job_dir / "extras"), "TF_CPP_MIN_LOG_LEVEL": "3", **(extra_env or {})})
    log = done.stdout + done.stderr
    stack = next((json.loads(l[6:]) for l in log.splitlines() if l.startswith("STACK ")), None)
    other = next((json.loads(l[6:]) for l in log.splitlines() if l.startswith("OTHER ")), None)
    assert stack is not None or not need_stack, log[-3000:]
    return stack, other, log


def test_the_venv_keeps_its_own_packages_and_other_pythons_get_none_of_the_modules(tmp_path, report):
    """EBPYTHONPREFIXES and the venv's .pth: (a) the venv's own einops wins over the module's,
    (b) the system's Python in the same job finds none of the module's packages, (c) the venv's
    Python finds TensorFlow and Keras in the module, after its own site-packages."""
    _lmod()
    _system_python("no other Python to check (b) with")
    stack, other, log = _run_stack(tmp_path, "EBPYTHONPREFIXES")
    venv = str(tmp_path / "venv")
    assert stack["einops"] == "99.0" and stack["einops_from"].startswith(venv), stack  # (a)
    assert other == {"tensorflow": None, "keras": None, "einops": None}, log[-2000:]  # (b) none of them, from anywhere, here
    assert stack["tensorflow_from"].startswith(sys.prefix) and stack["keras_from"].startswith(sys.prefix), stack  # (c)
    assert stack["myextras_from"].startswith(venv), stack
    sites = [p for p in stack["sys_path"] if p.endswith("-packages")]
    assert sites[1] == sysconfig.get_paths()["purelib"] and sites[0].startswith(venv), sites
    assert _needs_module(log), log[-2000:]  # (d) after module unload the venv finds no TensorFlow
    assert _gathered(log, "job_python", "python_before", "python_from_module", sys=sys) is True, log[-2000:]  # (h) the module's
    assert _gathered(log, "stack", "venv_from_module_python", sys=sys) is True, stack["base_prefix"]  # (i) the venv made from it
    assert _gathered(log, "stack", "venv_command", "venv_by_module_python", sys=sys) is \
        (True if sys.version_info >= (3, 11) else None), stack["pyvenv_cfg"]  # (k) ... by the module's `python` itself
    assert _gathered(log, "ebonly", "through_variable"), log[-2000:]  # (e) ... and finds it with only EBPYTHONPREFIXES
    assert _gathered(log, "stack", "module_site", "venv_site", "built_with", "setuptools_from", "setuptools_as_said", sys=sys,  # (f) the build's setuptools
                     job_dir=tmp_path) is True, stack["setuptools_built_with"]
    assert _gathered(log, "stack", "module_site", "venv_site", "wheel_command", "wheel_from_module", sys=sys, job_dir=tmp_path) \
        is True, stack["bdist_wheel_built_with"]  # (j) the build's bdist_wheel: the module's
    from importlib.metadata import distributions
    builders = _gathered(log, "stack", "module_site", "module_builders", distributions=distributions)  # ... as its WHEEL says
    assert _gathered(log, "stack", "wheel_generator") in builders, (stack["wheel_generator"], builders)
    assert _gathered(log, "stack", "module_site", "venv_site", "sites", "stdlib_first", sys=sys, job_dir=tmp_path) is True, \
        stack["sys_path"]  # (g) the standard library before every site directory
    took = {l.split()[0]: float(l.split()[-2]) for l in log.splitlines() if l.startswith(("MADE the venv in ", "INSTALLED "))}
    assert sorted(took) == ["INSTALLED", "MADE"] and all(s > 0 for s in took.values()), log[-2000:]  # (l) each one's time
    report(f"lesson 17's job: the venv made in {took['MADE']} s, your packages installed offline in {took['INSTALLED']} s")
    report(f"lesson 17's module (EBPYTHONPREFIXES) and venv (.pth): venv's einops {stack['einops']} kept, "
           f"TensorFlow {stack['tensorflow']} from the module after the venv's site-packages, /usr/bin/python3 finds {other}; "
           f"python before the load {_gathered(log, 'python_before')!r}; myextras built with {stack['setuptools_built_with']} "
           f"and {stack['bdist_wheel_built_with']} (WHEEL: built by {stack['wheel_generator']})")


def test_system_site_packages_adds_the_system_pythons_sites_and_finds_no_module(tmp_path, report):
    """Lesson 17, tenth review, finding 2: the lesson said the flag's effect could not be shown here. It now says what it
    does here: the venv's Python is /usr/bin/python3's, so the flag adds that Python's own site directories after the
    module's, and it is not what finds the module (the .pth reader, in the venv's own site-packages, is). The job run with
    the flag and without it: both import TensorFlow from the module; the site directories after the venv's and the module's
    are exactly /usr/bin/python3's existing ones with the flag, none without."""
    _lmod()
    _system_python("no system Python whose site directories the flag would add")
    done = subprocess.run(["/usr/bin/python3", "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
                          capture_output=True, text=True, timeout=60)
    system_sites = [p for p in json.loads(done.stdout) if os.path.isdir(p)]
    with_flag, _, _ = _run_stack(tmp_path / "with", "EBPYTHONPREFIXES")
    without, _, log = _run_stack(tmp_path / "without", "EBPYTHONPREFIXES",
                                 edits=((VENV_LINE, VENV_LINE.replace(" --system-site-packages", "")),))
    sites = {how: [p for p in s["sys_path"] if p.endswith("-packages")] for how, s in (("with", with_flag), ("without", without))}
    report(f"lesson 17's venv with --system-site-packages: site directories {sites['with']}; without: {sites['without']}; "
           f"TensorFlow from {with_flag['tensorflow_from']} and {without['tensorflow_from']}")
    assert "include-system-site-packages = false" in without["pyvenv_cfg"], without["pyvenv_cfg"]
    assert all(s["tensorflow_from"].startswith(sys.prefix + os.sep) for s in (with_flag, without)), log[-2000:]
    assert sites["with"][2:] == system_sites and system_sites and sites["without"][2:] == [], (sites, system_sites)


def _gathered(log: str, *targets: str, **names):
    """The notebook's own reading of the job's log: its gathering cell's assignments to `targets`, in
    order (with `names` defined); the value of the last."""
    from tests.support.proof_cells import assignment_source

    namespace = {"json": json, "os": os, "sys": sys, "sysconfig": sysconfig, "Path": Path, "stack_log": log, **names}
    exec(_cell("other_python = next("), namespace)  # the cell that reads the job's lines, with its own path tests
    for target in targets:
        exec(assignment_source("17_software_stack.ipynb", target), namespace)
    return namespace[targets[-1]]


def _needs_module(log: str) -> bool:
    """The notebook's reading of the job's UNLOADED line."""
    return _gathered(log, "unloaded", "needs_module")


def test_a_pth_reader_that_names_the_course_itself_is_caught_after_module_unload(tmp_path):
    """Broken: a .pth reader that hard-codes the course venv's site-packages instead of reading
    EBPYTHONPREFIXES. The venv still finds TensorFlow with the module loaded (the rest of the proof would
    hold), but also after `module unload`: the notebook's `needs_module` must be False."""
    _lmod()
    hard_coded = f'site.addsitedir({sysconfig.get_paths()["purelib"]!r})  # broken: not from EBPYTHONPREFIXES\n'
    stack, _, log = _run_stack(tmp_path, "EBPYTHONPREFIXES", reader=hard_coded)
    assert stack["tensorflow_from"].startswith(sys.prefix), stack
    assert not _needs_module(log), log[-2000:]


OTHER_VARIABLE_READER = ('root = os.environ.get("COURSE_MODULE_ROOT", "")  # broken: not EBPYTHONPREFIXES\n'
                         'if root:\n'
                         '    site.addsitedir(os.path.join(root, "lib", "python%d.%d" % sys.version_info[:2], "site-packages"))\n')


def test_a_pth_reader_of_another_variable_is_caught_with_ebpythonprefixes_alone(tmp_path, report):
    """Broken (lesson 17's first review, finding 3): a .pth reader that reads the module's
    COURSE_MODULE_ROOT instead of EBPYTHONPREFIXES. With the module loaded the venv finds TensorFlow, and
    after `module unload` none (the unload check alone holds); with only EBPYTHONPREFIXES set by hand it
    finds none either: the notebook's `through_variable` must be False."""
    _lmod()
    stack, _, log = _run_stack(tmp_path, "EBPYTHONPREFIXES", reader=OTHER_VARIABLE_READER)
    assert stack["tensorflow_from"].startswith(sys.prefix), stack
    assert _needs_module(log), log[-2000:]
    ebonly = _gathered(log, "ebonly")
    report(f"lesson 17, a .pth reader of COURSE_MODULE_ROOT: TensorFlow from {stack['tensorflow_from']} with the module, "
           f"none after the unload, with only EBPYTHONPREFIXES: {ebonly}")
    assert _gathered(log, "ebonly", "through_variable") is False, log[-2000:]


def test_the_job_drops_an_inherited_pythonpath_and_the_user_site(tmp_path, report):
    """Lesson 17, second review, finding 2: `module purge` takes back only what modules set. The job is
    started with a PYTHONPATH of the learner's own (another einops in it) and a user site-packages holding a
    package: the job script's `unset PYTHONPATH` and `export PYTHONNOUSERSITE=1` must keep the venv's own
    einops and leave the user site off the path, and the notebook's reading of the STACK line must agree."""
    _lmod()
    inherited = tmp_path / "inherited" / "einops"
    inherited.mkdir(parents=True)
    (inherited / "__init__.py").write_text('__version__ = "0.1-inherited"\n')
    user_base = tmp_path / "userbase"
    user_site = user_base / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    user_site.mkdir(parents=True)
    job_dir = tmp_path / "job"
    stack, _, log = _run_stack(job_dir, "EBPYTHONPREFIXES",
                               extra_env={"PYTHONPATH": str(inherited.parent), "PYTHONUSERBASE": str(user_base)})
    read = _gathered(log, "stack", "module_site", "venv_site", "sites", "recommended_route", "user_site_off",
                     sysconfig=sysconfig, sys=sys, Path=Path, job_dir=job_dir)
    dropped = _gathered(log, "stack", "handed", "pythonpath_dropped", your_pythonpath=inherited.parent)
    report(f"lesson 17's job started with PYTHONPATH={inherited.parent.name}/ and a user site: PYTHONPATH in the job "
           f"{stack['pythonpath']!r}, einops {stack['einops']}, user site read {stack['user_site']}, "
           f"user site on sys.path {str(user_site) in stack['sys_path']}; the notebook's user_site_off {read}, "
           f"pythonpath_dropped {dropped}")
    assert dropped is True, log[-2000:]
    assert stack["pythonpath"] == "" and stack["einops"] == "99.0", stack
    assert stack["user_site"] is False and str(user_site) not in stack["sys_path"], stack
    assert read is True and _gathered(log, "stack", "module_site", "venv_site", "sites", "recommended_route",
                                      sysconfig=sysconfig, sys=sys, Path=Path, job_dir=job_dir) is True, log[-2000:]


def test_a_job_that_keeps_your_pythonpath_is_caught(tmp_path, report):
    """Lesson 17, fourth review, finding 10: the lesson hands its job a PYTHONPATH of yours (an einops of yours in it).
    Broken: the job script without `unset PYTHONPATH`. The job prints what it was handed (HANDED) and its Python's
    sys.path holds it: the notebook's `pythonpath_dropped` must be False."""
    _lmod()
    yours = tmp_path / "your-pythonpath"
    (yours / "einops").mkdir(parents=True)
    (yours / "einops" / "__init__.py").write_text('__version__ = "0.1-yours"\n')
    stack, _, log = _run_stack(tmp_path / "job", "EBPYTHONPREFIXES", edits=(("\nunset PYTHONPATH ", "\n: unset PYTHONPATH "),),
                               extra_env={"PYTHONPATH": str(yours)})
    handed = _gathered(log, "handed")
    dropped = _gathered(log, "stack", "handed", "pythonpath_dropped", your_pythonpath=yours)
    report(f"lesson 17's job without `unset PYTHONPATH`: handed {handed!r}, einops {stack['einops']}, "
           f"yours on sys.path {str(yours) in stack['sys_path']}; pythonpath_dropped {dropped}")
    assert handed == str(yours) and str(yours) in stack["sys_path"] and stack["einops"] == "0.1-yours", log[-2000:]
    assert dropped is False, log[-2000:]


def test_a_node_without_the_system_python_says_so_and_the_proof_says_not_checked(tmp_path, report, capsys):
    """Lesson 17, fourth review, finding 1: the OTHER line needs /usr/bin/python3 on the node. The job script run where
    that path holds no Python (the script's path planted elsewhere) prints NO_OTHER with the node's name and no OTHER
    line; the notebook reads it, and its proof passes printing NOT CHECKED and the reason, not a failure."""
    from tests.support.proof_cases import OK
    from tests.support.proof_cells import run_proof

    _lmod()
    missing = tmp_path / "no-such-dir" / "python3"
    stack, other, log = _run_stack(tmp_path / "job", "EBPYTHONPREFIXES", edits=(("/usr/bin/python3", str(missing)),))
    other_python, other_missing = _gathered(log, "other_python", sys=sys), _gathered(log, "other_missing")
    run_proof("17_software_stack.ipynb", {**OK["17_software_stack.ipynb"], "other_python": other_python,
                                          "other_missing": other_missing})
    said = capsys.readouterr().out
    report(f"lesson 17's job with no {missing.name} at the checked path: OTHER {other}, NO_OTHER {other_missing!r}; "
           f"the proof printed: {said.strip().splitlines()[0]!r}")
    assert stack is not None and other is None and other_python is None, log[-2000:]
    assert other_missing and str(missing) in other_missing, log[-2000:]
    assert f"NOT CHECKED (another Python in the job): {other_missing}" in said, said


def test_the_system_python_with_an_einops_of_its_own_is_not_handed_the_modules(tmp_path, report):
    """Lesson 17, tenth review, finding 6: the OTHER line said only whether /usr/bin/python3 found each package anywhere, so
    a system Python with an einops of its own (Debian's python3-einops, say) failed the proof ('should not be handed'). The
    job now prints where it finds each, and the notebook counts only what lies in the module's environment. The job run with
    a system Python that has its own einops (a stand-in at the checked path: /usr/bin/python3 with that einops on its path)
    must pass the proof's OTHER check."""
    from tests.support.proof_cases import OK
    from tests.support.proof_cells import run_proof

    _lmod()
    _system_python("no other Python to give an einops of its own")
    own = tmp_path / "system-einops"
    (own / "einops").mkdir(parents=True)
    (own / "einops" / "__init__.py").write_text('__version__ = "0.1-system"\n')
    system_python = tmp_path / "python3"  # /usr/bin/python3, with its own einops
    system_python.write_text(f'#!/bin/sh\nPYTHONPATH={own} exec /usr/bin/python3 "$@"\n')
    system_python.chmod(0o755)
    stack, other, log = _run_stack(tmp_path / "job", "EBPYTHONPREFIXES", edits=(("/usr/bin/python3", str(system_python)),))
    other_python = _gathered(log, "other_python", sys=sys)
    report(f"lesson 17's job, the system's Python with its own einops: OTHER {other}; the notebook's other_python {other_python}")
    assert other and other["einops"] == str(own / "einops" / "__init__.py"), log[-2000:]
    assert other_python == {"tensorflow": False, "keras": False, "einops": False}, other
    run_proof("17_software_stack.ipynb", {**OK["17_software_stack.ipynb"], "other_python": other_python})


@pytest.mark.parametrize("reader,module_alone", [(None, True), (OTHER_VARIABLE_READER, False)],
                         ids=["the lesson's reader", "a reader of another variable"])
def test_a_system_wide_tensorflow_is_not_the_modules(tmp_path, report, reader, module_alone):
    """Lesson 17, the tenth review's fix left two checks as they were: UNLOADED and EBONLY said only whether the venv found
    TensorFlow anywhere, so a system-wide TensorFlow failed a good job's unload check and passed the EBPYTHONPREFIXES-only
    check of a .pth reader of another variable. The job now prints where it finds it, and the notebook counts only a place
    inside the module's environment. Run with a system-wide TensorFlow (a stand-in: a tensorflow package in a directory the
    venv reads after the module's site-packages, where --system-site-packages puts /usr/bin/python3's own), the proof
    passes with the lesson's reader and fails with a reader of another variable ('only EBPYTHONPREFIXES')."""
    from tests.support.proof_cases import OK
    from tests.support.proof_cells import holds_unless, run_proof

    _lmod()
    system = tmp_path / "system" / "dist-packages"
    (system / "tensorflow").mkdir(parents=True)
    (system / "tensorflow" / "__init__.py").write_text('__version__ = "0.0-system"\n')
    pth = 'echo "import ebpythonprefixes" > "$site/ebpythonprefixes.pth"\n'  # then the stand-in, read after the module
    stack, _, log = _run_stack(tmp_path / "job", "EBPYTHONPREFIXES", reader=reader,
                               edits=((pth, pth + f'  echo "{system}" > "$site/zz-system-site.pth"\n'),))
    gathered = {name: _gathered(log, name) for name in ("unloaded", "ebonly", "needs_module", "through_variable")}
    report(f"lesson 17's job with a system-wide TensorFlow, {'the lesson' if reader is None else 'another variable'}'s reader: "
           f"TensorFlow from {stack['tensorflow_from']} with the module; UNLOADED {gathered['unloaded']}, "
           f"EBONLY {gathered['ebonly']}; needs_module {gathered['needs_module']}, through_variable {gathered['through_variable']}")
    assert stack["tensorflow_from"].startswith(sys.prefix + os.sep), stack  # loaded, the module's comes first
    assert gathered["unloaded"]["tensorflow"] == str(system / "tensorflow" / "__init__.py"), log[-2000:]
    assert gathered["needs_module"] is True and gathered["through_variable"] is module_alone, gathered
    holds_unless(None if module_alone else "only EBPYTHONPREFIXES", run_proof, "17_software_stack.ipynb",
                 {**OK["17_software_stack.ipynb"], **gathered})


def test_a_reader_that_moves_the_standard_library_last_is_caught(tmp_path, report):
    """Lesson 17, fourth review, finding 5: the lesson's .pth reader moves nothing, so the standard library stays before
    every site directory. Broken: a reader that also does what EasyBuild's sitecustomize.py does last, moving the
    entries under the Python's own prefix to the end: the notebook's `stdlib_first` must be False."""
    _lmod()
    easybuild_like = READER_LOOP + ("base = [p for p in sys.path if p.startswith(sys.base_prefix)]  # broken: EasyBuild's move\n"
                                    "sys.path[:] = [p for p in sys.path if p not in base] + base\n")
    stack, _, log = _run_stack(tmp_path, "EBPYTHONPREFIXES", reader=easybuild_like)
    first = _gathered(log, "stack", "module_site", "venv_site", "sites", "stdlib_first", sys=sys, job_dir=tmp_path)
    easybuild = _gathered(log, "stack", "easybuild")
    report(f"lesson 17, a reader that moves {stack['stdlib']} last: sys.path {stack['sys_path']}; stdlib_first {first}, "
           f"EasyBuild's sitecustomize.py ran: {easybuild} ({stack['sitecustomize']})")
    assert stack["sys_path"].index(stack["stdlib"]) > stack["sys_path"].index(stack["myextras_from"].rsplit("/myextras/", 1)[0]), \
        stack["sys_path"]
    assert first is False and easybuild is False, log[-2000:]
    with pytest.raises(AssertionError, match="standard library should come before"):  # no EasyBuild script: a wrong order
        _prove_stack_order(log)


def _prove_stack_order(log: str) -> None:
    """Lesson 17's proof on a correct run but for the standard library's place, read from the job's `log` by the
    notebook's own gathering."""
    from tests.support.proof_cases import OK
    from tests.support.proof_cells import run_proof

    run_proof("17_software_stack.ipynb", {**OK["17_software_stack.ipynb"], "stack": _gathered(log, "stack"),
                                          "stdlib_first": _gathered(log, "stack", "sites", "stdlib_first"),
                                          "easybuild": _gathered(log, "stack", "easybuild"),
                                          "easybuild_order": _gathered(log, "stack", "base_entries", "easybuild_order")})


# EasyBuild's sitecustomize.py, as its Python easyblock writes it (SITECUSTOMIZE in easybuild-easyblocks'
# easybuild/easyblocks/p/python.py; the debug prints left out): the same steps, the same first line
EASYBUILD_SITECUSTOMIZE = """
# sitecustomize.py script installed by EasyBuild,
# to pick up Python packages installed with `--prefix` into folders listed in $EBPYTHONPREFIXES

import os
import site
import sys

ebpythonprefixes = os.getenv('EBPYTHONPREFIXES')

if ebpythonprefixes:
    postfix = os.path.join('lib', 'python' + '.'.join(map(str, sys.version_info[:2])), 'site-packages')
    potential_sys_prefixes = (getattr(sys, attr, None) for attr in ("real_prefix", "base_prefix", "prefix"))
    sys_prefix = next(p for p in potential_sys_prefixes if p)
    base_paths = [p for p in sys.path if p.startswith(sys_prefix)]

    for prefix in ebpythonprefixes.split(os.pathsep):
        sitedir = os.path.join(prefix, postfix)
        if os.path.isdir(sitedir):
            site.addsitedir(sitedir)

    # Move base python paths to the end of sys.path so modules can override packages from the core Python module
    sys.path = [p for p in sys.path if p not in base_paths] + base_paths
"""


def _easybuild_python(root: Path) -> Path:
    """A Python installation laid out as EasyBuild installs one, made from another installation's Python of this version
    (pyenv's): its binary copied (Python finds its prefix from where the binary is), its standard library and shared
    library linked, and EasyBuild's sitecustomize.py in its own lib/pythonX.Y/site-packages. Its `python`."""
    other = _python_of_another_installation()
    if other is None:
        pytest.skip(f"no Python {sys.version_info[0]}.{sys.version_info[1]} of another installation here (~/.pyenv, "
                    "/usr/local/bin, /opt) to lay out as EasyBuild's")
    real, version = Path(other).resolve(), "%d.%d" % sys.version_info[:2]
    (root / "bin").mkdir(parents=True)
    shutil.copy2(real, root / "bin" / real.name)
    for alias in ("python3", "python"):
        (root / "bin" / alias).symlink_to(real.name)
    for library in real.parents[1].glob("lib/libpython*"):
        (root / "lib").mkdir(exist_ok=True)
        (root / "lib" / library.name).symlink_to(library)
    lib = root / "lib" / f"python{version}"
    (lib / "site-packages").mkdir(parents=True)
    for entry in (real.parents[1] / "lib" / f"python{version}").iterdir():
        if entry.name != "site-packages":
            (lib / entry.name).symlink_to(entry)
    (lib / "site-packages" / "sitecustomize.py").write_text(EASYBUILD_SITECUSTOMIZE)
    return root / "bin" / "python"


def _stand_in_course(python: Path, prefix: Path) -> Path:
    """The course's environment made from `python`: a venv with stand-ins for TensorFlow and Keras, an einops of the
    module's own, and this environment's `wheel` with the `packaging` it imports (the job's build takes its bdist_wheel
    from the module). Its site-packages."""
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(prefix)], check=True, capture_output=True, timeout=300)
    site_dir = prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    for name, version in {"tensorflow": "0-standin", "keras": "0-standin", "einops": "0.8.2"}.items():
        (site_dir / name).mkdir()
        (site_dir / name / "__init__.py").write_text(f'__version__ = "{version}"\n')
    purelib = Path(sysconfig.get_paths()["purelib"])
    for found in (p for name in ("wheel", "packaging") for p in (purelib / name, *purelib.glob(f"{name}-*.dist-info"))):
        shutil.copytree(found, site_dir / found.name)  # each package and its dist-info
    return site_dir


def test_a_course_python_made_by_easybuild_passes_with_easybuilds_order(tmp_path, report):
    """Issues 51/54, finding 1: where the course's Python is made from a Python EasyBuild built, that Python's
    sitecustomize.py runs in the job's venv too and moves the entries under its prefix, the standard library among
    them, after every other: a correct set-up, which the proof failed ('standard library should come before'). The job
    (the course's environment a stand-in venv of such a Python) now says EasyBuild's script ran, and the proof checks
    EasyBuild's order and passes; a wrong order still fails it (the test above, and the gathering cases of
    tests/proofs/test_lesson_17.py)."""
    _lmod()
    course = tmp_path / "course"
    course_site = _stand_in_course(_easybuild_python(tmp_path / "easybuild-python"), course)
    job_dir = tmp_path / "job"
    stack, _, log = _run_stack(job_dir, "EBPYTHONPREFIXES", module_edits=((f'local root = "{sys.prefix}"', f'local root = "{course}"'),))
    module = SimpleNamespace(prefix=str(course), base_prefix=str(tmp_path / "easybuild-python"), version_info=sys.version_info)
    paths = SimpleNamespace(get_paths=lambda: {"purelib": str(course_site)})
    route = _gathered(log, "stack", "module_site", "venv_site", "sites", "recommended_route", sys=module, sysconfig=paths,
                      job_dir=job_dir)
    first, easybuild = _gathered(log, "stack", "sites", "stdlib_first"), _gathered(log, "stack", "easybuild")
    order = _gathered(log, "stack", "base_entries", "easybuild_order")
    report(f"lesson 17 on a stand-in EasyBuild Python: sitecustomize {stack['sitecustomize']}, sys.path {stack['sys_path']}; "
           f"recommended_route {route}, stdlib_first {first}, easybuild {easybuild}, easybuild_order {order}")
    assert stack["base_prefix"] == str(tmp_path / "easybuild-python") and stack["tensorflow_from"].startswith(str(course_site)), stack
    assert stack["sitecustomize"] == str(tmp_path / "easybuild-python" / course_site.relative_to(course) / "sitecustomize.py"), stack
    assert route is True and first is False and easybuild is True and order is True, log[-3000:]
    _prove_stack_order(log)  # EasyBuild's order: passes


def test_the_module_loads_the_modules_the_kernel_started_with(tmp_path, monkeypatch, report):
    """Issues 51/54, finding 2: the modulefile the lesson writes named no dependency, though the course's environment
    was built with the modules loaded where it runs (a Python's, CUDA's). Written where the kernel started with a
    stand-in dependency loaded (LOADEDMODULES), it loads it first with Lmod (its bin/ still first on PATH), and unloads
    it with itself; the job script, after `module purge`, gets it with the course's module, and loads it back after
    `module unload` (only the course's module gone)."""
    import re
    import shlex

    _lmod()
    dependency = tmp_path / "modulefiles" / "fakecuda"
    dependency.mkdir(parents=True)
    (dependency / "12.4.lua").write_text('prepend_path("PATH", "/opt/fakecuda/12.4/bin")\nsetenv("FAKECUDA_ROOT", "/opt/fakecuda/12.4")\n')
    monkeypatch.setenv("LOADEDMODULES", "fakecuda/12.4")  # where the kernel started: read when the modulefile is written
    stack, _, log = _run_stack(tmp_path, "EBPYTHONPREFIXES", extra_env={"LOADEDMODULES": ""})  # the job: none loaded
    show = 'echo "$LOADEDMODULES|${FAKECUDA_ROOT-}|${PATH%%:*}"'
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EBPYTHONPREFIXES", "VIRTUAL_ENV", "LOADEDMODULES")}
    shell = subprocess.run(["bash", "-lc", f"module use {shlex.quote(str(tmp_path / 'modulefiles'))}; module load tf-hpc-course/2026.11; "
                            f"{show}; echo \"$PATH\" | tr : '\\n' | sed -n 2p; module unload tf-hpc-course/2026.11; {show}"],
                           capture_output=True, text=True, timeout=120, env=env)
    loaded, second, unloaded = shell.stdout.strip().splitlines()[-3:]
    after_unload = _gathered(log, "unloaded")
    report(f"lesson 17's module written with LOADEDMODULES=fakecuda/12.4: loaded {loaded!r}, PATH's second {second!r}, after "
           f"the unload {unloaded.split('|')[:2]}; the job's module list {re.findall(r'[0-9]+[)] +([^ ]+)', log)}, UNLOADED {after_unload}")
    assert loaded == f"fakecuda/12.4:tf-hpc-course/2026.11|/opt/fakecuda/12.4|{sys.prefix}/bin" and second == "/opt/fakecuda/12.4/bin", \
        shell.stdout + shell.stderr
    assert unloaded.split("|")[:2] == ["", ""], shell.stdout + shell.stderr
    assert re.search(r"[0-9]+[)] +fakecuda/12[.]4\s", log) and _gathered(log, "loaded", re=re), log[-2000:]
    assert _gathered(log, "job_python", "python_before", "python_from_module", sys=sys) is True, log[-2000:]
    assert after_unload == {"tensorflow": None, "EBPYTHONPREFIXES": "", "LOADEDMODULES": "fakecuda/12.4"}, log[-2000:]  # found nowhere


VENV_LINE = '  time python -m venv --system-site-packages "$VENV"'  # the job makes its venv with the module's `python`


def _python_of_another_installation() -> str | None:
    """A Python of this one's version from another installation (its sys.base_prefix not this one's): pyenv's, one in
    /usr/local or /opt; None where there is none."""
    import glob

    version = "%d.%d" % sys.version_info[:2]
    found = [*sorted(glob.glob(str(Path.home() / f".pyenv/versions/{version}*/bin/python{version}"))),
             f"/usr/local/bin/python{version}", *sorted(glob.glob(f"/opt/*/bin/python{version}"))]
    for python in (p for p in found if os.access(p, os.X_OK)):
        done = subprocess.run([python, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True, timeout=60)
        if done.returncode == 0 and done.stdout.strip() not in ("", sys.base_prefix):
            return python
    return None


def test_a_venv_made_from_another_python_is_caught(tmp_path, report):
    """Lesson 17, fifth review, finding 1 (variant A2): the job's venv made by another installation's Python of the same
    version, the module loaded all the same. TensorFlow still comes from the module (EBPYTHONPREFIXES), and the proof
    passed (it printed the PYTHON line, never checked it). The venv's base_prefix is that Python's: the notebook's
    `venv_from_module_python` must be False (its `python_from_module` stays True: `python` is the module's)."""
    _lmod()
    other = _python_of_another_installation()
    if other is None:
        pytest.skip(f"no Python {sys.version_info[0]}.{sys.version_info[1]} of another installation here (~/.pyenv, "
                    "/usr/local/bin, /opt): nothing to make the venv with")
    stack, _, log = _run_stack(tmp_path, "EBPYTHONPREFIXES", edits=((VENV_LINE, VENV_LINE.replace("python", other, 1)),))
    python = _gathered(log, "job_python", "python_before", "python_from_module", sys=sys)
    base = _gathered(log, "stack", "venv_from_module_python", sys=sys)
    report(f"lesson 17, the venv made by {other}: TensorFlow from {stack['tensorflow_from']}, the venv's base_prefix "
           f"{stack['base_prefix']} (the kernel's {sys.base_prefix}); python_from_module {python}, venv_from_module_python {base}")
    assert stack["tensorflow_from"].startswith(sys.prefix) and stack["base_prefix"] != sys.base_prefix, stack
    assert python is True and base is False, log[-2000:]


def test_a_venv_made_by_the_system_python_is_caught(tmp_path, report):
    """Lesson 17, seventh review, finding 1: the job's venv made by `/usr/bin/python3 -m venv`, the module loaded all the
    same. The module's Python is itself a venv of /usr/bin/python3, so this venv's base_prefix is the kernel's too and
    the proof passed. Only the `command` line of its pyvenv.cfg (Python 3.11+) names the python that made it: the
    notebook's `venv_by_module_python` must be False (its `venv_from_module_python` stays True)."""
    _lmod()
    _system_python("no other python of the module's installation to make the venv with")
    system_base = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True,
                                 timeout=60).stdout.strip()
    if sys.version_info < (3, 11) or system_base != sys.base_prefix:
        pytest.skip(f"Python {sys.version_info[0]}.{sys.version_info[1]} (no command line before 3.11), /usr/bin/python3's "
                    f"base {system_base} (the kernel's {sys.base_prefix}): not the case of the review")
    stack, _, log = _run_stack(tmp_path, "EBPYTHONPREFIXES", edits=((VENV_LINE, VENV_LINE.replace("python", "/usr/bin/python3", 1)),))
    base = _gathered(log, "stack", "venv_from_module_python", sys=sys)
    made_by = _gathered(log, "stack", "venv_command", "venv_by_module_python", sys=sys)
    report(f"lesson 17, the venv made by /usr/bin/python3: its base_prefix {stack['base_prefix']} (the kernel's {sys.base_prefix}), "
           f"pyvenv.cfg's {_gathered(log, 'stack', 'venv_command')!r}; venv_from_module_python {base}, venv_by_module_python {made_by}")
    assert stack["tensorflow_from"].startswith(sys.prefix) and base is True, stack
    assert made_by is False, stack["pyvenv_cfg"]


def test_a_module_that_puts_nothing_on_path_is_caught(tmp_path, report):
    """Lesson 17, fifth review, finding 1 (variant A): the modulefile without its PATH line. The job's `python` is then
    whatever the login shell finds first (pyenv's shim here), and the venv is made from it: the notebook's
    `python_from_module` must be False. Where a login shell finds no `python` at all the job makes no venv: nothing
    to show."""
    _lmod()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EBPYTHONPREFIXES", "VIRTUAL_ENV")}
    found = subprocess.run(["bash", "-lc", "command -v python"], capture_output=True, text=True, timeout=60, env=env).stdout.strip()
    if not found or found == f"{sys.prefix}/bin/python":
        pytest.skip(f"a login shell here finds {found or 'no'} `python` without the module: no other Python to take its place")
    stack, _, log = _run_stack(tmp_path, "EBPYTHONPREFIXES", module_edits=(('prepend_path("PATH", pathJoin(root, "bin"))\n', ""),))
    python = _gathered(log, "job_python", "python_before", "python_from_module", sys=sys)
    report(f"lesson 17, the module without its PATH line: the job's python {_gathered(log, 'job_python')}, the venv's base_prefix "
           f"{stack['base_prefix']}; python_from_module {python}")
    assert python is False, log[-2000:]


PURGE = "\nmodule purge\n"  # the job script's clean slate, once


def test_python_kept_first_by_the_login_shell_is_not_taken_for_the_modules(tmp_path, report):
    """Lesson 17, sixth review, finding 1: a login shell that keeps PATH (RHEL's) with this kernel's venv bin/ first, and
    the modulefile without its PATH line. `python` after the load is this kernel's all the same, which the proof took
    for the module's doing (it read only the PYTHON line): the notebook's `python_from_module` must be False now that
    the job also says which `python` it had before the load (PYTHON_BEFORE)."""
    _lmod()
    kept = f"\nexport PATH={sys.prefix}/bin:$PATH  # broken: the login shell kept a PATH with this kernel's venv first\nmodule purge\n"
    assert _notebook_script().count(PURGE) == 1
    stack, _, log = _run_stack(tmp_path, "EBPYTHONPREFIXES", edits=((PURGE, kept),),
                               module_edits=(('prepend_path("PATH", pathJoin(root, "bin"))\n', ""),))
    python = _gathered(log, "job_python", "python_before", "python_from_module", sys=sys)
    report(f"lesson 17, the venv's bin/ kept first by the login shell, the module without its PATH line: python before the load "
           f"{_gathered(log, 'python_before')}, after it {_gathered(log, 'job_python')}; python_from_module {python}")
    assert _gathered(log, "job_python") == f"{sys.prefix}/bin/python", log[-2000:]  # what the old proof passed on
    assert python is False, log[-2000:]


def _notebook_script() -> str:
    return next(text for name, text in written_programs("17_software_stack.ipynb").items() if name.endswith('"stack.sbatch"}'))


def test_solution_2_in_a_login_shell_that_keeps_path_with_the_venv_first(tmp_path, monkeypatch, report):
    """Lesson 17, sixth review, finding 1: with this kernel's venv bin/ first on its PATH, a login shell that keeps the
    PATH it is handed (RHEL's; here each shell restores it, with the real Lmod) saw that entry before the load, and
    solution 2 failed ('what was first comes second'). Its shells now get the lesson's PATH for the job, and it passes."""
    import shlex

    _lmod()
    monkeypatch.setenv("PATH", f"{sys.prefix}/bin:{os.environ['PATH']}")
    namespace = {"job_dir": tmp_path, "sys": sys, "os": os, "print": lambda *a, **k: None}
    for marker in ('modulefiles = job_dir / "modulefiles"', 'extras = job_dir / "extras"', "settings_env = "):
        exec(_cell(marker), namespace)
    handed = []

    def keeping_path(args, **kwargs):  # bash -lc, as a login shell that keeps the PATH it is handed
        path = (kwargs.get("env") or os.environ)["PATH"]
        handed.append(path)
        return subprocess.run([*args[:2], f"export PATH={shlex.quote(path)}; {args[2]}"], **kwargs)

    namespace.update({"lmod_here": True, "lmod_why": "", "subprocess": SimpleNamespace(run=keeping_path)})
    exec(_cell("# Solution 2:"), namespace)
    report(f"lesson 17 solution 2, the kernel's PATH starting {sys.prefix}/bin, a login shell that keeps PATH: "
           f"its shells were handed PATHs starting {[p.split(':')[0] for p in handed]}")
    assert handed and all(f"{sys.prefix}/bin" not in p.split(":") for p in handed), handed


def test_the_venvs_build_takes_the_modules_wheel_and_stops_without_one(tmp_path, report):
    """Lesson 17, sixth review, finding 2: `pip install --no-build-isolation` installs no build requirements, and the
    venv's setuptools (Debian's 66.1.1 here) has no bdist_wheel of its own: the build needs a `wheel`. A venv made
    without --system-site-packages has none, and the build of the lesson's myextras stops. Broken: the job's build run
    with EBPYTHONPREFIXES empty (the reader adds nothing): it takes another `wheel` (Debian's python3-wheel, through
    --system-site-packages) and the notebook's `wheel_from_module` must be False; where the system has none, the
    build stops as above."""
    _lmod()
    prose = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                 if c.cell_type == "markdown" and "`#!/bin/bash -l` makes the batch shell" in c.source)
    assert "--no-build-isolation" in prose and "from the module: here its\n  `wheel`'s (TensorFlow's `astunparse` requires" \
        in prose, prose
    namespace = {"job_dir": tmp_path / "alone", "print": lambda *a: None}
    exec(_cell('extras = job_dir / "extras"'), namespace)
    bare = tmp_path / "bare"  # a venv of the module's Python that sees nothing else
    subprocess.run([sys.executable, "-m", "venv", str(bare)], check=True, capture_output=True, timeout=300)
    alone = subprocess.run([str(bare / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index", "--no-build-isolation",
                            str(namespace["extras"] / "myextras")], capture_output=True, text=True, timeout=300)
    pip = '"$VENV/bin/python" -m pip install'
    stack, _, log = _run_stack(tmp_path / "job", "EBPYTHONPREFIXES", edits=((pip, f"EBPYTHONPREFIXES= {pip}"),), need_stack=False)
    caught = stack and _gathered(log, "stack", "module_site", "venv_site", "wheel_command", "wheel_from_module", sys=sys,
                                 job_dir=tmp_path / "job")
    report(f"lesson 17, myextras built in a venv with no wheel: exit {alone.returncode}, "
           f"{[l.strip() for l in alone.stderr.splitlines() if 'bdist_wheel' in l][-1:]}; the job's build without the "
           f"module's packages: bdist_wheel from {stack and stack['bdist_wheel_built_with']}, wheel_from_module {caught}")
    assert alone.returncode != 0 and "invalid command 'bdist_wheel'" in alone.stderr, alone.stderr[-2000:]
    if stack is None:  # no wheel on the system's path either
        assert "invalid command 'bdist_wheel'" in log, log[-3000:]
    else:
        assert caught is False, log[-2000:]


def test_a_node_whose_module_is_tcl_says_no_lmod_and_the_proof_says_not_checked(tmp_path, report, capsys):
    """Lesson 17, sixth review, finding 4: on a node whose `module` is Tcl Environment Modules (a stand-in answers
    `module --version` as Modules 5.2 does), the job prints NO_LMOD with the node and that answer, and stops; the
    notebook reads it, and its proof passes printing NOT CHECKED for the module with the reason, not a failure."""
    from tests.support.proof_cases import OK
    from tests.support.proof_cells import run_proof

    tcl = 'module() { echo "Modules Release 5.2.0 (2022-11-08)" >&2; }  # Tcl Environment Modules\' answer\n'
    stack, _, log = _run_stack(tmp_path, "EBPYTHONPREFIXES", edits=(("\nif ! module --version", f"\n{tcl}if ! module --version"),),
                               need_stack=False)
    not_checked = _gathered(log, "no_lmod", "stack_not_checked", lmod_here=True, use_slurm=True, lmod_why="")  # as on Slurm
    run_proof("17_software_stack.ipynb", {**OK["17_software_stack.ipynb"], "stack": None, "ran_stack": False, "loaded": False,
                                          "no_lmod": _gathered(log, "no_lmod"), "stack_not_checked": not_checked})
    said = capsys.readouterr().out
    report(f"lesson 17's job where `module` is Tcl: {[l for l in log.splitlines() if l.startswith('NO_LMOD')]}; the proof printed "
           f"{said.strip().splitlines()[0]!r}")
    assert stack is None and "Modules Release 5.2.0" in (not_checked or ""), log[-2000:]
    assert f"NOT CHECKED (the module and the venv on top of it): {not_checked}" in said, said


def test_the_setuptools_that_built_myextras_is_read_from_the_build(tmp_path, report):
    """Lesson 17, second review, finding 4: which setuptools built the venv's packages is what `myextras`'s
    setup.py recorded during the build, not which one the venv imports afterwards. Broken: the job's pip install
    run with the module's site-packages first on PYTHONPATH, so the module's setuptools builds; afterwards the
    venv still imports its own. The notebook's `setuptools_as_said` must be False (on Python 3.11)."""
    _lmod()
    module_site = sysconfig.get_paths()["purelib"]
    pip = '"$VENV/bin/python" -m pip install'
    stack, _, log = _run_stack(tmp_path, "EBPYTHONPREFIXES", edits=((pip, f"PYTHONPATH={module_site} {pip}"),))
    imported = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", "import setuptools; print(setuptools.__file__)"],
                              capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]}).stdout.strip()
    as_said = _gathered(log, "stack", "module_site", "venv_site", "built_with", "setuptools_from", "setuptools_as_said", sys=sys, job_dir=tmp_path)
    report(f"lesson 17, pip install with the module's site-packages on PYTHONPATH: myextras built with "
           f"{stack['setuptools_built_with']}, the venv imports {imported} afterwards; setuptools_as_said {as_said}")
    assert imported.startswith(str(tmp_path / "venv")), imported  # what the proof read before the review
    assert stack["setuptools_built_with"].startswith(module_site), stack
    assert as_said is (sys.version_info >= (3, 12)), log[-2000:]


def test_a_module_on_pythonpath_shadows_the_venv_and_reaches_every_python(tmp_path):
    """The same job with a module on PYTHONPATH (prepend_path PYTHONPATH, EasyBuild's default): the
    module's einops shadows the venv's own, and the system's Python is handed TensorFlow: what
    EBPYTHONPREFIXES avoids."""
    _lmod()
    _system_python("no other Python to check with")
    stack, other, log = _run_stack(tmp_path, "PYTHONPATH")
    assert stack["pythonpath"] and stack["einops"] != "99.0" and stack["einops_from"].startswith(sys.prefix), stack
    assert other is not None and other["tensorflow"].startswith(sys.prefix + os.sep), log[-2000:]


SHELL_STANDINS = """module() { printf 'module'; printf ' [%s]' "$@"; echo; } >> "$RECORD"
touch() { printf 'touch %s\\n' "$*" >> "$RECORD"; }
"""


def _solution_2_shells(job_dir: Path) -> list[str]:
    """The `bash -lc` strings lesson 17's solution 2 builds for `job_dir`, taken by a stand-in
    `subprocess.run` that answers as Lmod would (so the cell runs to its end). The venv's Python is a
    script that records the path it was run by."""
    modulefiles, python = job_dir / "modulefiles", job_dir / "venv" / "bin" / "python"
    (modulefiles / "tf-hpc-course").mkdir(parents=True)
    modulefile = modulefiles / "tf-hpc-course" / "2026.11.lua"
    modulefile.write_text('prepend_path("PATH", "bin")\n')
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\nprintf "python [%s]\\n" "$0" >> "$RECORD"\n')
    python.chmod(0o755)
    # PATH|EBPYTHONPREFIXES|COURSE_MODULE_ROOT|"set" where that is set at all: before (the earlier root solution 2
    # sets), with the module, after
    variables = f"/usr/bin||/your/earlier/root|set\n{sys.prefix}/bin:/usr/bin|{sys.prefix}|{sys.prefix}|set\n/usr/bin|||"
    answers, shells = iter([variables, "0.1-other", "99.0"]), []

    def run(args, **_):
        assert args[:2] == ["bash", "-lc"], args
        shells.append(args[2])
        return subprocess.CompletedProcess(args, 0, next(answers), "")

    namespace = {"lmod_here": True, "lmod_why": "", "job_dir": job_dir, "modulefiles": modulefiles, "modulefile": modulefile,
                 "settings_env": {"PATH": "/usr/bin"}, "os": os, "sys": sys, "subprocess": SimpleNamespace(run=run),
                 "print": lambda *a, **k: None}
    exec(_cell("# Solution 2:"), namespace)
    return shells


def test_solution_2_keeps_a_job_directory_with_a_space_and_a_semicolon_one_argument(tmp_path, report):
    """Solution 2 puts the job directory into `bash -lc`: a directory named `my dir; touch PWNED` must
    reach `module use` and the shell as one argument each, and run no `touch`."""
    job_dir = tmp_path / "my dir; touch PWNED"
    shells = _solution_2_shells(job_dir)
    record, cwd = tmp_path / "record", tmp_path / "cwd"
    cwd.mkdir()
    for shell in shells:
        subprocess.run(["bash", "-c", SHELL_STANDINS + shell], cwd=cwd, capture_output=True, timeout=30,
                       env={"PATH": os.environ["PATH"], "RECORD": str(record)})
    calls = record.read_text().splitlines()
    uses = [call for call in calls if call.startswith("module [use]")]
    touches = [call for call in calls if call.startswith("touch")]
    report(f"lesson 17 solution 2, job directory {job_dir.name!r}: {len(shells)} bash -lc strings, "
           f"module use called {len(uses)} times, touch run {len(touches)} times")
    assert len(shells) == 3 and uses == [f"module [use] [{job_dir / 'modulefiles'}]"] * 4, calls
    assert calls.count(f"python [{job_dir / 'venv' / 'bin' / 'python'}]") == 2, calls
    assert not touches and not list(cwd.iterdir()), calls


TWO_REPLICAS = """import runpy, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)  # before any op
import mwms_slurm
def two_replicas(**_):  # one worker, its 2 replicas on 2 logical CPU devices, as on a node's 2 GPUs
    strategy = tf.distribute.MultiWorkerMirroredStrategy._from_local_devices(["/cpu:0", "/cpu:1"])
    print("REPLICAS", strategy.num_replicas_in_sync, flush=True)
    return strategy
mwms_slurm.make_strategy = two_replicas
sys.argv = ["keras_versions.py", "--keras", "3"]
runpy.run_path("keras_versions.py", run_name="__main__")
"""


def test_keras_3_fit_on_one_worker_needs_no_fix(tmp_path, report):
    """Lesson 17 runs its Keras variants on 2 workers or more because Keras 3 `fit` under MWMS fails only
    then (keras-team/keras#20585): its own program, Keras 3 without the fix, fits alone (no TF_CONFIG),
    as the one worker of a TF_CONFIG cluster, and (lesson 17's ninth review, finding 2: said, never run) as one
    worker with 2 replicas, on 2 logical CPU devices as on a node's 2 GPUs (`_from_local_devices`, as the lesson says)."""
    from helpers.local_workers import run_local_workers
    from helpers.take_home import copy_beside

    copy_beside(tmp_path)  # mwms_slurm.py, as the lesson puts it beside the program
    program = tmp_path / "keras_versions.py"
    program.write_text(next(text for name, text in written_programs("17_software_stack.ipynb").items()
                            if name.endswith('"keras_versions.py"}')))
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("SLURM_")}
    alone = subprocess.run([sys.executable, str(program), "--keras", "3"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, env=env)
    one = run_local_workers([str(program), "--keras", "3"], n=1, deadline_s=300, env=env, ok_statuses=(0, 3))
    (tmp_path / "two_replicas.py").write_text(TWO_REPLICAS)
    two = subprocess.run([sys.executable, "two_replicas.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    logs = {"alone": alone.stdout + alone.stderr, "one-worker TF_CONFIG": one[0].output, "2 replicas": two.stdout + two.stderr}
    fits = {how: [json.loads(l[6:])["fit"] for l in log.splitlines() if l.startswith("KERAS ")] for how, log in logs.items()}
    replicas = [line.split()[1] for line in two.stdout.splitlines() if line.startswith("REPLICAS ")]
    report(f"lesson 17's keras_versions.py --keras 3 (no fix) on one worker: {fits}; replicas of the 2-replica run: {replicas}")
    assert fits == {"alone": ["ok"], "one-worker TF_CONFIG": ["ok"], "2 replicas": ["ok"]} and replicas == ["2"], \
        {how: log[-2000:] for how, log in logs.items()}


FIRST_PATCH_ONLY = """import runpy, sys
from pathlib import Path
import mwms_slurm
fix = mwms_slurm.fix_keras_fit_for_multiworker
def first_patch_only():  # the fix, then its second patch (scalar step logs reduced over no axis) taken back
    from keras.src.backend.tensorflow import trainer
    reduce = trainer.reduce_per_replica
    fix()
    trainer.reduce_per_replica = reduce
mwms_slurm.fix_keras_fit_for_multiworker = first_patch_only
sys.argv = ["keras_versions.py", "--keras", "3", "--fix"]
runpy.run_path(str(Path(__file__).with_name("keras_versions.py")), run_name="__main__")
"""


def test_keras_3_fit_with_the_first_patch_alone_fails_on_the_step_logs(tmp_path, report):
    """Lesson 17, tenth review, finding 3: the lesson says that with the first of its two bugs patched alone (the first
    batch's shapes learnt without reducing it), both workers then fail with `Invalid reduction dimension 0 for input with 0
    dimensions` (each step's scalar logs reduced along an axis they do not have); it was stated from a run, never asserted.
    Its own program on 2 local workers, `--fix` with the fix's second patch taken back: each worker's fit must end so."""
    from helpers.local_workers import run_local_workers
    from helpers.take_home import copy_beside

    copy_beside(tmp_path)  # mwms_slurm.py, as the lesson puts it beside the program
    (tmp_path / "keras_versions.py").write_text(next(text for name, text in written_programs("17_software_stack.ipynb").items()
                                                     if name.endswith('"keras_versions.py"}')))
    (tmp_path / "first_patch_only.py").write_text(FIRST_PATCH_ONLY)
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("SLURM_")} | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    runs = run_local_workers([str(tmp_path / "first_patch_only.py")], n=2, deadline_s=300, env=env, ok_statuses=(0, 3))
    reports = [json.loads(l[6:]) for run in runs for l in run.output.splitlines() if l.startswith("KERAS ")]
    report(f"lesson 17's keras_versions.py --fix without the fix's second patch, 2 workers: "
           f"{[(r['rank'], r['replicas'], r['fit']) for r in reports]}")
    assert sorted(r["rank"] for r in reports) == [0, 1] and all(r["replicas"] == 2 for r in reports), \
        [run.output[-2000:] for run in runs]
    assert all(r["fit"].startswith("ValueError: Invalid reduction dimension 0 for input with 0 dimensions") for r in reports), \
        reports  # raised while Keras traces the step (a graph's shape check): a ValueError


WITHOUT_TF_KERAS = """import runpy, sys
from pathlib import Path
site, farm = sys.argv[1:3]
sys.path[sys.path.index(site)] = farm  # the module's packages, but tf_keras
sys.argv = ["keras_versions.py", "--keras", "2"]
runpy.run_path(str(Path(__file__).with_name("keras_versions.py")), run_name="__main__")
"""


def test_keras_2_without_tf_keras_stops_at_tf_keras(tmp_path, report):
    """Lesson 17, tenth review, finding 5: the lesson says Keras 2 needs both the tf_keras package and TF_USE_LEGACY_KERAS=1,
    and what the variable alone does. Its own program, `--keras 2` (the variable set), in an environment with every package
    of the module's but tf_keras: TensorFlow warns that tf_keras is missing, `tf.keras` raises ImportError ('Keras cannot be
    imported'), and the program stops there with no KERAS report (it does not fall back to Keras 3)."""
    from helpers.take_home import copy_beside

    copy_beside(tmp_path)  # mwms_slurm.py, as the lesson puts it beside the program
    (tmp_path / "keras_versions.py").write_text(next(text for name, text in written_programs("17_software_stack.ipynb").items()
                                                     if name.endswith('"keras_versions.py"}')))
    (tmp_path / "without_tf_keras.py").write_text(WITHOUT_TF_KERAS)
    done = _run_without_tf_keras(tmp_path, "without_tf_keras.py")
    log = done.stdout + done.stderr
    raised = [l for l in log.splitlines() if l.startswith("ImportError")]
    reports = [l for l in log.splitlines() if l.startswith("KERAS ")]
    report(f"lesson 17's keras_versions.py --keras 2 without tf_keras: exit {done.returncode}, {raised}, "
           f"KERAS reports {len(reports)}")
    assert done.returncode != 0 and not reports, log[-2000:]
    assert "you do not have the tf_keras package installed" in log, log[-2000:]
    assert raised == ["ImportError: Keras cannot be imported. Check that it is installed."], log[-2000:]
    assert "package = tf.keras.__name__" in log, log[-2000:]  # the traceback's line: the program's first tf.keras


def _run_without_tf_keras(tmp_path: Path, program: str) -> subprocess.CompletedProcess:
    """`program` (in tmp_path) run with every package of the module's but tf_keras: its first two arguments are this
    Python's site-packages and a directory of links to each entry of it but tf_keras, which the program puts in its place."""
    site = sysconfig.get_paths()["purelib"]
    farm = tmp_path / "site-packages"
    farm.mkdir(exist_ok=True)
    for entry in Path(site).iterdir():
        if not entry.name.startswith("tf_keras") and not (farm / entry.name).exists():
            (farm / entry.name).symlink_to(entry)
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "TF_USE_LEGACY_KERAS") and not k.startswith("SLURM_")}
    return subprocess.run([sys.executable, str(tmp_path / program), site, str(farm)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env | {"TF_CPP_MIN_LOG_LEVEL": "3"})


def test_the_pth_reader_adds_only_prefixes_that_hold_a_site_directory(tmp_path):
    """Lesson 17, sixteenth review, finding 3: the job's reader does as EasyBuild's sitecustomize.py (it adds a prefix only
    where its site-packages exists). Run as its .pth runs it, with EBPYTHONPREFIXES naming a prefix that has none before
    one that has: ADDED (what the job reports) holds only the second. The reader before the review added both."""
    reader = _notebook_script().split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    (tmp_path / "ebpythonprefixes.py").write_text(reader)
    version = "python%d.%d" % sys.version_info[:2]
    (tmp_path / "real" / "lib" / version / "site-packages").mkdir(parents=True)
    prefixes = os.pathsep.join([str(tmp_path / "missing"), str(tmp_path / "real")])
    done = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); "
                           "import ebpythonprefixes; print(ebpythonprefixes.ADDED)"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "EBPYTHONPREFIXES": prefixes})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str([str(tmp_path / "real" / "lib" / version / "site-packages")]), done.stdout


FROM_IMPORT_WITHOUT_TF_KERAS = """import os, sys
site, farm = sys.argv[1:3]
sys.path[sys.path.index(site)] = farm  # the module's packages, but tf_keras
os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before import tensorflow, as the lesson says
import tensorflow as tf
from tensorflow.keras import Input, Sequential, layers  # Keras 2 code's usual import style
model = Sequential([Input((4,)), layers.Dense(1)])
print("MODEL_FROM", type(model).__module__, "TF_KERAS", tf.keras.__name__)
"""


def test_keras_2_code_that_imports_from_tensorflow_keras_gets_keras_3_without_tf_keras(tmp_path, report):
    """Lesson 17, sixteenth review, finding 1: with TF_USE_LEGACY_KERAS=1 and no tf_keras package, only `tf.keras` refuses;
    `from tensorflow.keras import ...` finds Keras 3, silently (TF 2.21's tensorflow/__init__.py puts the missing package's
    directory, None, before Keras 3's keras/_tf_keras on tensorflow's __path__), and binds it to tf.keras. The lesson says so."""
    (tmp_path / "from_import.py").write_text(FROM_IMPORT_WITHOUT_TF_KERAS)
    done = _run_without_tf_keras(tmp_path, "from_import.py")
    log = done.stdout + done.stderr
    line = next((l for l in done.stdout.splitlines() if l.startswith("MODEL_FROM ")), "")
    report(f"lesson 17: Keras 2 code in `from tensorflow.keras import` style without tf_keras: exit {done.returncode}, {line}")
    assert done.returncode == 0 and line.split()[1].startswith("keras.src."), log[-2000:]  # Keras 3's model
    assert "ImportError" not in log and "tf_keras package" not in log, log[-2000:]  # no error, no warning


STAND_IN_WORKER = """import json, os, sys, time
rank = int(os.environ["SLURM_PROCID"])
time.sleep(4 * rank)  # the first worker fails first; its peer reports 4 s later
print("KERAS " + json.dumps({"rank": rank, "args": sys.argv[1:]}), flush=True)
sys.exit(3)  # as keras_versions.py does when fit failed
"""


@pytest.mark.slurm
def test_every_keras_worker_reports_where_the_site_kills_a_step_on_a_bad_exit(slurm, tmp_path, report):
    """Lesson 17, fifth review, finding 3: srun's --kill-on-bad-exit defaults to the site's KillOnBadExit; where that is
    1 (here SLURM_KILL_BAD_EXIT=1, srun's own variable for the same default), the first worker to exit 3 has Slurm kill
    its peer before the peer prints its KERAS line. The lesson's keras_versions.sbatch, run with a stand-in worker that
    exits 3 on rank 0 at once and on rank 1 4 s later, must get both reports from each of its three steps."""
    (tmp_path / "keras_versions.sbatch").write_text(next(text for name, text in written_programs("17_software_stack.ipynb").items()
                                                         if name.endswith('"keras_versions.sbatch"}')))
    (tmp_path / "keras_versions.py").write_text(STAND_IN_WORKER)
    env = {**slurm["env"], "PYTHON": sys.executable, "SLURM_KILL_BAD_EXIT": "1"}
    done = subprocess.run(["sbatch", "--wait", "--parsable", "--export=ALL", "keras_versions.sbatch"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    job = done.stdout.strip().split(";")[0]
    log = (tmp_path / f"tf-keras-versions-{job}.out").read_text() if job else done.stderr
    reports = sorted((r["args"][-1], r["rank"]) for r in (json.loads(l[6:]) for l in log.splitlines() if l.startswith("KERAS ")))
    report(f"lesson 17's keras_versions.sbatch, srun's default set to kill a step on a bad exit: {len(reports)} of 6 reports "
           f"(step, rank): {reports}")
    assert reports == sorted([("3", 0), ("3", 1), ("--fix", 0), ("--fix", 1), ("2", 0), ("2", 1)]), log[-2000:]


def test_the_lessons_apptainer_build_command_names_files_the_checkout_has():
    """Lesson 17, second review, finding 3: the build command as the lesson prints it, read, not run (no Apptainer
    here), against the course's checkout, where the lesson says to run it: the definition is at the path it names,
    every `%files` source (Apptainer resolves a relative one against the directory the build runs in) exists there,
    and BASE_DIGEST is the part after `sha256:` (the definition writes `@sha256:{{ BASE_DIGEST }}`). The old command
    named `tf-hpc-course.def`."""
    import re

    root = NOTEBOOK.parents[1]
    prose = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                 if c.cell_type == "markdown" and "apptainer build" in c.source)
    command = re.search(r"`apptainer build ([^`]*)`", prose)
    assert command and "from the course's checkout" in prose, prose
    words = command.group(1).split()
    assert words[:2] == ["--build-arg", "BASE_DIGEST=<the"] and "after sha256:>" in command.group(1), words
    image, definition = words[-2:]
    assert image.endswith(".sif") and (root / definition).is_file(), (definition, root)
    text = (root / definition).read_text()
    assert "@sha256:{{ BASE_DIGEST }}" in text, text[:2000]
    section = text.split("%files", 1)[1].split("\n%", 1)[0]
    sources = [line.split()[0] for line in section.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert sources and all((root / source).exists() for source in sources), [s for s in sources if not (root / s).exists()]
