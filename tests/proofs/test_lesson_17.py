"""Lesson 17's proof cell (notebooks/17_software_stack.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

import os
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from tests.support.notebooks import written_programs
from tests.support.proof_cells import (NOTEBOOKS, assignment_source, function_source, gather_and_prove, holds_unless,
                                      solution_source)


# where a venv's Python finds TensorFlow: the module's environment (this Python is the module's), or a system-wide one
_MODULE_TF_17 = f"{sysconfig.get_paths()['purelib']}/tensorflow/__init__.py"
_SYSTEM_TF_17 = "/usr/lib/python3/dist-packages/tensorflow/__init__.py"


@pytest.mark.parametrize("log,expected", [
    ('UNLOADED {"tensorflow": null, "EBPYTHONPREFIXES": ""}\n', True),
    (f'UNLOADED {{"tensorflow": "{_MODULE_TF_17}", "EBPYTHONPREFIXES": ""}}\n', False),  # the module's, without it loaded
    # tenth review's fix, leftover: a system-wide TensorFlow after the unload is not the module's (the old check: found anywhere)
    (f'UNLOADED {{"tensorflow": "{_SYSTEM_TF_17}", "EBPYTHONPREFIXES": ""}}\n', True),
    ("", False),  # the job never got that far
], ids=["not found", "the module's found anyway", "a system-wide one", "no line"])
def test_lesson_17_needs_module_reads_the_unloaded_line(log, expected):
    """TensorFlow came through the module only if the venv finds none of the module's after `module unload`."""
    namespace = {"json": __import__("json"), "os": os, "sys": sys, "stack_log": log}
    exec(_cell_17("other_python = next("), namespace)  # the cell that reads the job's lines
    exec(assignment_source("17_software_stack.ipynb", "needs_module"), namespace)
    assert namespace["needs_module"] is expected


@pytest.mark.parametrize("log,expected", [
    ("\nCurrently Loaded Modules:\n  1) tf-hpc-course/2026.11\n\n", True),
    # Lmod 8.6's `module list` with a centre's sticky module left by `module purge`: one numbered line for both
    ("\nCurrently Loaded Modules:\n  1) aaa/1.0 (S)   2) tf-hpc-course/2026.11\n\n  Where:\n   S:  Module is Sticky\n", True),
    ('Lmod has detected the following error: The following module(s) are unknown:\n"tf-hpc-course/2026.11"\n', False),
    ("\nCurrently Loaded Modules:\n  1) aaa/1.0 (S)   2) tf-hpc-course/2026.110\n", False),  # another version
], ids=["alone", "after a sticky module", "unknown module", "another version"])
def test_lesson_17_loaded_needs_the_module_list_line_not_any_mention(log, expected):
    """Lmod names a module it cannot find too: only `module list`'s `N) NAME` entry proves it loaded,
    first on its line or after a sticky module (lesson 17's third review, finding 1)."""
    line = assignment_source("17_software_stack.ipynb", "loaded")
    assert eval(line.split("=", 1)[1], {"stack_log": log, "re": __import__("re")}) is expected


def test_lesson_17_without_slurm_or_lmod_says_the_job_did_not_run():
    """With neither Slurm nor Lmod the stack job cannot run: its cells say so, not "ran on nowhere"
    (lesson 17's third review, finding 4)."""
    cells = nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
    said = []
    namespace = {"use_slurm": False, "lmod_here": False, "added": [], "print": lambda *a, **k: said.append(" ".join(map(str, a)))}
    for cell in _stack_job_cells_17():
        exec(cell, namespace)
    assert namespace["stack"] is None and said[0] == "not run: neither Slurm nor Lmod here", said


def _stack_job_cells_17() -> list[str]:
    """Lesson 17's cell that runs the stack job, then the one that shows where it ran."""
    cells = nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
    return [next(c.source for c in cells if c.source.startswith("import os\nimport subprocess\n")),
            next(c.source for c in cells if c.cell_type == "code" and "stack = next(" in c.source)]


def test_lesson_17_when_sbatch_refuses_it_says_so(monkeypatch):
    """Lesson 17's fourth review, finding 2: when sbatch refused the stack job the cell printed "ran on Slurm job , with
    ..." (an empty job id). It must say the job did not run, and show sbatch's words."""
    refusal = "sbatch: error: Batch job submission failed: Requested node configuration is not available"
    monkeypatch.setattr(subprocess, "run", lambda command, **_: subprocess.CompletedProcess(command, 1, "", refusal + "\n"))
    said = []
    namespace = {"use_slurm": True, "lmod_here": True, "added": ["--exclusive=user"], "job_dir": Path("/nonexistent"),
                 "settings_env": {}, "job_environment": lambda extra: extra,
                 "print": lambda *a, **k: said.append(" ".join(map(str, a)))}
    for cell in _stack_job_cells_17():
        exec(cell, namespace)
    assert namespace["stack"] is None and namespace["where"] is None, namespace["where"]
    assert said == ["not run: sbatch refused the job, saying:", refusal], said


def test_lesson_17_stack_job_asks_for_no_gpu_the_keras_job_for_the_class_s(monkeypatch, tmp_path):
    """Lesson 17's fourth review, finding 8: the stack job only imports, so it asks for no GPU, even where the class gives
    each task one (COURSE_JOB_GPUS_PER_TASK=1), nor does its script carry a GPU line; the Keras job keeps the class's GPUs."""
    monkeypatch.setenv("COURSE_JOB_GPUS_PER_TASK", "1")
    monkeypatch.delenv("COURSE_CLASS_LAYOUT", raising=False)
    cells = nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
    namespace = {"use_slurm": True, "job_dir": tmp_path, "modulefiles": tmp_path / "m", "extras": tmp_path / "e"}
    exec(next(c.source for c in cells if c.cell_type == "code" and "added = job_options(" in c.source), namespace)
    script = next(text for name, text in written_programs("17_software_stack.ipynb").items() if name.endswith('"stack.sbatch"}'))
    submitted = []
    namespace.update({"use_slurm": True, "NODES": 2, "sys": sys, "follow_job": lambda *a, **k: "",
                      "subprocess": SimpleNamespace(run=lambda command, **_: submitted.append(command) or
                                                    SimpleNamespace(stdout="", stderr="refused"))})
    exec(next(c.source for c in cells if c.cell_type == "code" and '"keras_versions.sbatch"]' in c.source), namespace)
    assert namespace["added"] == ["--exclusive=user"] and "gpus" not in script, (namespace["added"], script[:600])
    assert len(submitted) == 1 and "--gpus-per-task=1" in submitted[0], submitted


_STACK_17 = {"pyvenv_cfg": "home = /usr/bin\ninclude-system-site-packages = true\n", "pythonpath": "",
             "sys_path": ["/usr/lib/python3.11", "/j/venv/lib/python3.11/site-packages", "/m/lib/python3.11/site-packages",
                          "/usr/lib/python3/dist-packages"], "reader_added": ["/m/lib/python3.11/site-packages"]}


@pytest.mark.parametrize("change,match", [
    ({}, None),
    ({"pythonpath": "/m/lib/python3.11/site-packages",  # a module on PYTHONPATH: its packages ahead
      "sys_path": ["/m/lib/python3.11/site-packages", "/j/venv/lib/python3.11/site-packages", "/usr/lib/python3/dist-packages"]},
     "recommended"),
    ({"pyvenv_cfg": "home = /usr/bin\ninclude-system-site-packages = false\n"}, "recommended"),  # not the route 17's "A venv on top of a module" gives
    ({"sys_path": ["/j/venv/lib/python3.11/site-packages", "/usr/lib/python3/dist-packages"]}, "recommended"),  # no .pth reader
    # seventeenth review: the module's site-packages in its place, but not put there by the reader (on a Python EasyBuild
    # built, its sitecustomize.py reads EBPYTHONPREFIXES too): the reader never ran, or added something else
    ({"reader_added": None}, "recommended"),
    ({"reader_added": ["/elsewhere/lib/python3.11/site-packages"]}, "recommended"),
], ids=["as the job reports", "PYTHONPATH", "no --system-site-packages", "module not read", "no reader ran",
        "reader added another"])
def test_lesson_17_recommended_route_needs_system_site_packages_the_pth_and_no_pythonpath(change, match):
    """The gathering of `recommended_route` on the job's report: the venv made with
    --system-site-packages, no PYTHONPATH, its own site-packages first and the module's right after."""
    nb = nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if "recommended_route = " in c.source and "assert" not in c.source)
    lines = cell.splitlines()
    first = next(i for i, l in enumerate(lines) if l.startswith("module_site = "))
    last = next(i for i, l in enumerate(lines) if l.startswith("recommended_route = "))
    while lines[last].rstrip().endswith("\\"):  # the statement's continuation lines
        last += 1
    source = "\n".join(lines[first:last + 1])
    namespace = {"sysconfig": SimpleNamespace(get_paths=lambda: {"purelib": "/m/lib/python3.11/site-packages"}),
                 "sys": SimpleNamespace(prefix="/m"), "Path": Path, "job_dir": Path("/j"), "stack": {**_STACK_17, **change}}
    exec(source, namespace)

    def prove():
        assert namespace["recommended_route"], "the venv should take the recommended route"

    holds_unless(match, prove)


class _Ran:
    """subprocess for lesson 17's solution 1: each program's Keras, as `keras_of` runs it. `rebinds`:
    `from tensorflow.keras import` binds what it found to tf.keras (Python's import does; TensorFlow 2.21)."""

    def __init__(self, from_import: str, rebinds: bool = True):
        self.from_import, self.rebinds = from_import, rebinds

    def run(self, command, **kwargs):
        program = command[-1]
        found = next(line for line in program.splitlines() if "found" in line and "print" not in line)
        if "from tensorflow.keras import" in found:
            keras = self.from_import
        elif self.rebinds and "tf.keras" in found and "from tensorflow.keras import" in program:
            keras = self.from_import  # the attribute, rebound by the import before it
        else:  # each attribute (tf.keras, tf.optimizers) follows the value at its own first use
            attribute = "tf.optimizers" if "tf.optimizers" in found else "tf.keras"
            keras = "keras" if program.index(attribute) < program.index("TF_USE_LEGACY_KERAS") else "tf_keras"
        return SimpleNamespace(stdout=f"{keras}.src.models.sequential\n", returncode=0)


@pytest.mark.parametrize("from_import,rebinds,match", [
    ("keras", True, None), ("tf_keras", True, "from tensorflow.keras import the import"),
    ("keras", False, "rebind tf.keras")],  # tf.keras kept its first-use Keras after the from-import
    ids=["import-time value", "follows the first use", "attribute not rebound"])
def test_lesson_17_solution_1_sees_the_import_path(from_import, rebinds, match):
    """Solution 1 checks `from tensorflow.keras import` apart from the attribute tf.keras: were the
    import to follow the value at first use (tf_keras), as the attribute does, it must fail; and were
    tf.keras to keep its first-use Keras after that import (no rebinding), too."""
    source = next(c.source for c in nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
                  if c.source.startswith("# Solution 1"))
    namespace = {"subprocess": _Ran(from_import, rebinds), "sys": SimpleNamespace(executable="python"),
                 "os": SimpleNamespace(environ={"TF_USE_LEGACY_KERAS": "1"}), "print": lambda *a, **k: None}
    holds_unless(match, exec, compile(source, "17 solution 1", "exec"), namespace)


_EARLIER_17 = "/your/earlier/root"  # COURSE_MODULE_ROOT before the load, as solution 2 sets it
# PATH|EBPYTHONPREFIXES|COURSE_MODULE_ROOT before the load, with the module, after the unload
# PATH|EBPYTHONPREFIXES|COURSE_MODULE_ROOT|"set" where COURSE_MODULE_ROOT is set at all: before, with, after the module
_VARIABLES_17 = f"/usr/bin:/bin||{_EARLIER_17}|set\n/m/bin:/usr/bin:/bin|/m|/m|set\n/usr/bin:/bin|||\n"


class _Shell:
    """subprocess for lesson 17's solution 2: the module's three variables before, with and after it
    (`variables`, as the shell prints them); the venv's einops in a job after another Python module,
    without and with `module purge`."""

    def __init__(self, no_purge: str, purge: str, variables: str = _VARIABLES_17):
        self.no_purge, self.purge, self.variables = no_purge, purge, variables

    def run(self, command, **kwargs):
        if "module unload" in command[-1]:
            return SimpleNamespace(stdout=self.variables)
        return SimpleNamespace(stdout=(self.purge if "module purge" in command[-1] else self.no_purge) + "\n")


@pytest.mark.parametrize("no_purge,purge,variables,match", [
    ("0.1-other", "99.0", _VARIABLES_17, None),
    ("99.0", "99.0", _VARIABLES_17, "without module purge"),  # the other module's PYTHONPATH never got ahead: nothing shown
    ("0.1-other", "0.1-other", _VARIABLES_17, "without module purge"),  # module purge did not help
    ("0.1-other", "99.0", _VARIABLES_17.replace("|/m|/m", "||/m"), "set EBPYTHONPREFIXES and"),  # no EBPYTHONPREFIXES from the module
    ("0.1-other", "99.0", _VARIABLES_17.replace("|/m|/m", "|/m|"), "set EBPYTHONPREFIXES and"),  # no COURSE_MODULE_ROOT
    ("0.1-other", "99.0", _VARIABLES_17[:-4] + "|/m||\n", "give PATH and EBPYTHONPREFIXES back"),  # EBPYTHONPREFIXES left after unload
    ("0.1-other", "99.0", _VARIABLES_17[:-4] + "||/m|set\n", "unset COURSE_MODULE_ROOT"),  # COURSE_MODULE_ROOT left
    # sixteenth review: left set but empty ("${COURSE_MODULE_ROOT-}" alone printed the same as unset)
    ("0.1-other", "99.0", _VARIABLES_17[:-4] + "|||set\n", "unset COURSE_MODULE_ROOT"),
    ("0.1-other", "99.0", _VARIABLES_17[:-17] + "/m/bin:/usr/bin:/bin|||\n", "give PATH and EBPYTHONPREFIXES back"),  # PATH keeps bin/
    # lesson 17's fourth review, finding 3: unload restored the earlier COURSE_MODULE_ROOT (pushenv, not setenv) ...
    ("0.1-other", "99.0", _VARIABLES_17[:-4] + f"||{_EARLIER_17}|set\n", "unset COURSE_MODULE_ROOT, not restore"),
    # ... or there was no earlier value to restore (the shell never set it: "not restored" shown by nothing)
    ("0.1-other", "99.0", _VARIABLES_17.replace(f"||{_EARLIER_17}|set\n", "|||\n", 1), "unset COURSE_MODULE_ROOT, not restore"),
    # finding 6: bin/ first, but what was first is not second (the module put its entry elsewhere too, or reordered)
    ("0.1-other", "99.0", _VARIABLES_17.replace("/m/bin:/usr/bin:/bin", "/m/bin:/bin:/usr/bin"), "what was first comes second"),
], ids=["as run", "no shadowing shown", "purge did not help", "no EBPYTHONPREFIXES", "no COURSE_MODULE_ROOT",
        "EBPYTHONPREFIXES left", "COURSE_MODULE_ROOT left", "COURSE_MODULE_ROOT left empty", "PATH left", "COURSE_MODULE_ROOT restored",
        "no earlier COURSE_MODULE_ROOT", "PATH reordered"])
def test_lesson_17_solution_2_shows_what_a_forgotten_purge_does(tmp_path, no_purge, purge, variables, match):
    """Solution 2's answers: the module's three variables set (its bin/ first on PATH, what was first second), PATH's and
    EBPYTHONPREFIXES's entries given back by `module unload` and COURSE_MODULE_ROOT unset, an earlier value not restored;
    and "what can go wrong": the venv takes another Python module's einops without `module purge`, and its own with it;
    each must be seen, or the solution fails."""
    source = next(c.source for c in nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
                  if c.source.startswith("# Solution 2"))
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    (tmp_path / "modulefiles").mkdir()
    namespace = {"subprocess": _Shell(no_purge, purge, variables), "sys": SimpleNamespace(prefix="/m"), "os": os,
                 "lmod_here": True, "lmod_why": "", "settings_env": {"PATH": "/usr/bin:/bin"}, "job_dir": tmp_path,
                 "modulefiles": tmp_path / "modulefiles", "print": lambda *a, **k: None}
    holds_unless(match, exec, compile(source, "17 solution 2", "exec"), namespace)


@pytest.mark.parametrize("edit,match", [
    (None, None),
    (("setenv(\"COURSE_MODULE_ROOT\", root)\n", "setenv(\"COURSE_MODULE_ROOT\", root)\n"
      "prepend_path(\"PYTHONPATH\", pathJoin(root, \"lib\"))\n"), "modulefile should prepend"),  # hands its packages out on PYTHONPATH too
    (("prepend_path(\"EBPYTHONPREFIXES\", root)", "prepend_path(\"EBPYTHONPREFIXES\", \"/elsewhere\")"), "modulefile should prepend"),
    (("pathJoin(root, \"bin\")", "root"), "modulefile should prepend"),  # PATH gets the prefix, not its bin/
], ids=["as written", "also PYTHONPATH", "another prefix", "PATH without bin"])
def test_lesson_17_solution_2_without_lmod_reads_what_the_modulefile_sets(tmp_path, edit, match):
    """Without Lmod, solution 2 reads the modulefile: the three variables, each set as the lesson says
    (bin/ first on PATH, the prefix in EBPYTHONPREFIXES, COURSE_MODULE_ROOT), and no PYTHONPATH (lesson 17's
    second review, finding 6: three lines of any content passed before)."""
    cells = nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
    namespace = {"job_dir": tmp_path, "print": lambda *a, **k: None}
    exec(next(c.source for c in cells if c.cell_type == "code" and 'modulefiles = job_dir / "modulefiles"' in c.source), namespace)
    if edit is not None:
        text = namespace["modulefile"].read_text()
        assert edit[0] in text, edit
        namespace["modulefile"].write_text(text.replace(*edit))
    namespace.update({"lmod_here": False, "lmod_why": "no module here", "settings_env": {"PATH": "/usr/bin:/bin"}, "os": os,
                      "subprocess": None})
    source = next(c.source for c in cells if c.source.startswith("# Solution 2"))
    holds_unless(match, exec, compile(source, "17 solution 2", "exec"), namespace)


@pytest.mark.parametrize("loaded,expected", [
    ("Python/3.11.5-GCCcore-13.2.0:CUDA/12.4.0:tf-hpc-course/2026.11",  # a rerun: the course's own module loaded too
     ['depends_on("Python/3.11.5-GCCcore-13.2.0")', 'depends_on("CUDA/12.4.0")']),
    ("", [])], ids=["a python and a cuda module", "none loaded"])
def test_lesson_17_the_modulefile_depends_on_the_modules_the_kernel_started_with(tmp_path, monkeypatch, loaded, expected):
    """Issues 51/54, finding 2: a module built against other modules (a Python's, CUDA's) should load them. The modulefile
    names each module of LOADEDMODULES where the kernel started, but the course's own, in a depends_on line before its
    PATH line (Lmod loads them there, so its bin/ still comes first); none where none is loaded."""
    monkeypatch.setenv("LOADEDMODULES", loaded)
    namespace = {"job_dir": tmp_path, "print": lambda *a, **k: None}
    exec(_cell_17('modulefiles = job_dir / "modulefiles"'), namespace)
    text = namespace["modulefile"].read_text()
    depends = [line.split("--")[0].strip() for line in text.splitlines() if line.startswith("depends_on")]
    assert depends == expected, text
    assert not expected or text.index("depends_on") < text.index('prepend_path("PATH"'), text


def _cell_17(marker: str) -> str:
    """Lesson 17's code cell holding `marker`."""
    return next(c.source for c in nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
                if c.cell_type == "code" and marker in c.source)


def test_lesson_17_one_node_is_refused_with_what_to_set(monkeypatch):
    """Lesson 17's sixth review, finding 5: NODES = 1 raised a ValueError that said the runs "need 2 or more workers"
    because fit "fails on 2 or more". It must be the course's one-line CourseError, saying what to set."""
    from helpers.errors import CourseError

    monkeypatch.delenv("COURSE_MODE", raising=False)
    with pytest.raises(CourseError, match=r"^NODES = 1: set NODES = 2 or more in the first code cell \(Keras 3 fit under "
                                          r"MWMS fails only on 2 or more workers; one worker with 2 CPU devices fits\)$"):
        exec(_cell_17("stopwatch = time_lesson("), {"MODE": None, "NODES": 1})


def _settings_env_17(tmp_path: Path, prefix: str) -> dict:
    """Lesson 17's settings for the stack job (its cell run with this kernel's `sys.prefix` as `prefix`)."""
    namespace = {"job_dir": tmp_path, "modulefiles": tmp_path / "m", "extras": tmp_path / "e", "os": os,
                 "sys": SimpleNamespace(prefix=prefix)}
    exec(_cell_17("settings_env = "), namespace)
    return namespace["settings_env"]


def test_lesson_17_the_job_gets_a_path_without_the_module_s_bin(tmp_path, monkeypatch):
    """Lesson 17's sixth review, finding 1: a kernel started from the activated venv has the module's bin/ first on PATH,
    and a login shell that keeps PATH (RHEL's) hands it to the job, where `python` is then the module's whatever the
    module does. The job's settings carry this kernel's PATH without that entry, the rest in order."""
    monkeypatch.setenv("PATH", "/m/bin:/usr/local/bin:/usr/bin:/m/bin/:/bin")
    assert _settings_env_17(tmp_path, "/m")["PATH"] == "/usr/local/bin:/usr/bin:/bin"


class _Lmod:
    """subprocess for lesson 17's solution 2, answering as Lmod does from the PATH each shell is given (its `env`, else
    this process's): the module's bin/ moved first on load (Lmod keeps one entry), and on unload an entry that was
    there before the load stays (Lmod counts it twice); the venv's einops as a job would see it."""

    def __init__(self):
        self.paths = []

    def run(self, command, **kwargs):
        path = (kwargs.get("env") or os.environ)["PATH"]
        self.paths.append(path)
        if "module unload" not in command[-1]:
            return SimpleNamespace(stdout="99.0\n" if "module purge" in command[-1] else "0.1-other\n")
        before = path.split(":")
        with_module = ["/m/bin", *[p for p in before if p != "/m/bin"]]
        after = before if "/m/bin" in before else with_module[1:]
        return SimpleNamespace(stdout=f"{':'.join(before)}||/your/earlier/root|set\n{':'.join(with_module)}|/m|/m|set\n"
                                      f"{':'.join(after)}|||\n")


def test_lesson_17_solution_2_with_the_venv_s_bin_first_on_the_kernel_s_path(tmp_path, monkeypatch):
    """Lesson 17's sixth review, finding 1: with the venv's bin/ first on the kernel's PATH, a login shell that keeps PATH
    saw it first before the load, and solution 2 failed ('what was first comes second', and bin/ left after the unload).
    Its shells now get the job's PATH (lesson 17's settings: without the module's bin/), and it passes."""
    monkeypatch.setenv("PATH", "/m/bin:/usr/bin:/bin")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    (tmp_path / "modulefiles").mkdir()
    lmod = _Lmod()
    namespace = {"subprocess": lmod, "sys": SimpleNamespace(prefix="/m"), "os": os, "lmod_here": True, "lmod_why": "",
                 "settings_env": _settings_env_17(tmp_path, "/m"), "job_dir": tmp_path, "modulefiles": tmp_path / "modulefiles",
                 "print": lambda *a, **k: None}
    exec(compile(solution_source("17_software_stack.ipynb", 2), "17 solution 2", "exec"), namespace)
    assert lmod.paths == ["/usr/bin:/bin"] * 3, lmod.paths


def test_lesson_17_a_site_with_tcl_modules_gets_not_checked_and_why(tmp_path, monkeypatch):
    """Lesson 17's sixth review, finding 4: the modulefile is Lua and what `module unload` gives back is Lmod's rule.
    Where a login shell's `module` is Tcl Environment Modules, the lesson asks it and finds no Lmod (it looked for
    Lmod's init file before); solution 2 says NOT CHECKED for the unload and the forgotten purge, with the reason; a
    stack job whose node has no Lmod prints NO_LMOD, and the proof says NOT CHECKED with it, not a failure; with no
    Slurm and no Lmod here the proof says NOT CHECKED and why."""
    tcl = "Modules Release 5.2.0 (2022-11-08)"
    monkeypatch.setattr(subprocess, "run", lambda command, **_: SimpleNamespace(stdout="", stderr=tcl + "\n"))  # the cell imports it
    check = {"print": lambda *a, **k: None}
    exec(_cell_17("lmod_here = "), check)
    monkeypatch.undo()
    assert check["lmod_here"] is False and tcl in check["lmod_why"], check["lmod_why"]
    said = []
    namespace = {"job_dir": tmp_path, "print": lambda *a, **k: said.append(" ".join(map(str, a)))}
    exec(_cell_17('modulefiles = job_dir / "modulefiles"'), namespace)
    namespace.update({"lmod_here": False, "lmod_why": check["lmod_why"], "settings_env": {"PATH": "/usr/bin"}, "os": os,
                      "subprocess": None})
    exec(compile(solution_source("17_software_stack.ipynb", 2), "17 solution 2", "exec"), namespace)
    assert [line for line in said if line.startswith("NOT CHECKED")] == [
        f"NOT CHECKED (what module unload gives back, Lmod's rule): {check['lmod_why']}",
        f"NOT CHECKED (a forgotten module purge): {check['lmod_why']}"], said
    node = f"'module' on node1 is not Lmod: {tcl}"
    for changes, reason in (({"stack": None, "log": f"NO_LMOD {node}\n"}, node),
                            ({"stack": None, "log": "\n", "use_slurm": False, "lmod_here": False, "lmod_why": check["lmod_why"]},
                             f"neither Slurm nor Lmod here ({check['lmod_why']})")):
        said.clear()
        gather_and_prove("17_software_stack.ipynb", {**_gathering_namespace_17(tmp_path, changes),
                                                     "print": lambda *a, **k: said.append(" ".join(map(str, a)))})
        assert f"NOT CHECKED (the module and the venv on top of it): {reason}" in said, said


def _keras_runs_17(**changes) -> dict:
    """Lesson 17's KERAS report lines, by variant: 2 workers each; `changes` maps a variant to
    per-worker changes (a list of 2 dicts), or to None for a run whose workers never reported."""
    good = {"Keras 3": {"fit": "ValueError: Attempt to convert a value (PerReplica:{...})", "module": "keras",
                        "keras": "3.15.1", "imported": "keras"},
            "Keras 3 + fix": {"fit": "ok", "weights": "a1", "moved": True, "module": "keras", "keras": "3.15.1",
                              "imported": "keras"},
            "Keras 2 (tf_keras)": {"fit": "ok", "weights": "b2", "moved": True, "module": "tf_keras", "keras": "2.21.0",
                                   "imported": "tf_keras"}}
    out = {}
    for name, report in good.items():  # one cluster of 2 workers, one replica each
        per_worker = changes.get(name, [{}, {}])
        out[name] = [] if per_worker is None else [{"rank": r, "host": f"node{r + 1}", "replicas": 2, "local": 1, **report, **c}
                                                   for r, c in enumerate(per_worker)]
    return out


_MODULE_SITE_17 = sysconfig.get_paths()["purelib"]  # this Python is the module's
# the site-packages of a sibling environment, .venv-gpu beside the module's .venv: its path starts with the module's prefix
_SIBLING_SITE_17 = sysconfig.get_paths()["purelib"].replace(sys.prefix, sys.prefix + "-gpu", 1)


def _stack_17(job_dir: Path, *, pythonpath=False, einops_from_module=False, tensorflow_from="", keras_from="",
              setuptools_from_module=False, user_site=False, stdlib_last=False, yours_on_path=False, wheel_in_venv=False,
              made_by: str = f"{sys.prefix}/bin/python", easybuild=False, reader_ran=True) -> dict:
    """The STACK line of lesson 17's job: the venv on top of the module (this Python is the module's), made by `made_by`
    (the command its pyvenv.cfg records: Python 3.11+ writes it; "" for none). `stdlib_last`:
    the standard library moved after the site directories (as EasyBuild's sitecustomize.py moves it); `yours_on_path`:
    the PYTHONPATH the job was handed (yours) on its Python's path; `wheel_in_venv`: the build's bdist_wheel from a wheel
    package of the venv's own, not the module's; `easybuild`: EasyBuild's sitecustomize.py ran, and moved the entries under
    the Python's own prefix (sys.base_prefix: the standard library, its zip, dist-packages here) after every other;
    `reader_ran`: the venv's .pth reader ran and added the module's site-packages (else the job reports None)."""
    module_site = sysconfig.get_paths()["purelib"]
    venv_site = str(job_dir / "venv" / Path(module_site).relative_to(sys.prefix))
    sites = [module_site, venv_site] if pythonpath else [venv_site, module_site]
    stdlib = "/usr/lib/python3.11"
    yours = [str(job_dir / "your-pythonpath")] if yours_on_path else []
    sys_path = ["", *yours, "/usr/lib/python311.zip", *([] if stdlib_last else [stdlib]), *sites, "/usr/lib/python3/dist-packages",
                *([stdlib] if stdlib_last else [])]
    if easybuild:  # as its script leaves sys.path: the entries under the base prefix, in their order, last
        sys_path = [p for p in sys_path if not p.startswith(sys.base_prefix)] + [p for p in sys_path if p.startswith(sys.base_prefix)]
    custom = f"{sys.base_prefix}/lib/python3.11/site-packages/sitecustomize.py" if easybuild else "/usr/lib/python3.11/sitecustomize.py"
    return {"python": f"{job_dir}/venv/bin/python", "prefix": str(job_dir / "venv"), "base_prefix": sys.base_prefix,
            "tensorflow": "2.21.0", "tensorflow_from": tensorflow_from or f"{module_site}/tensorflow/__init__.py",
            "keras": "3.15.1", "keras_from": keras_from or f"{module_site}/keras/__init__.py",
            "myextras_from": f"{venv_site}/myextras/__init__.py",
            "setuptools_built_with": f"{module_site if setuptools_from_module else venv_site}/setuptools/__init__.py",
            "bdist_wheel_built_with": f"{venv_site if wheel_in_venv else module_site}/wheel/_bdist_wheel.py",
            "wheel_generator": f"bdist_wheel ({version('wheel')})",  # the module's wheel built it (setuptools 66.1.1 here)
            "einops": "0.8.2" if einops_from_module else "99.0",
            "einops_from": f"{module_site if einops_from_module else venv_site}/einops/__init__.py",
            "pythonpath": module_site if pythonpath else "", "user_site": user_site, "pyvenv_cfg": "home = /usr/bin\ninclude-system-site-packages = true\n" + (
                f"command = {made_by} -m venv --system-site-packages {job_dir / 'venv'}\n" if made_by else ""),
            "sys_path": sys_path, "stdlib": stdlib, "sitecustomize": custom, "easybuild_sitecustomize": easybuild,
            "reader_added": [module_site] if reader_ran else None}


@pytest.mark.parametrize("changes,match", [
    ({}, None),
    ({"stack": None}, "should load the module"),  # the job's venv never reported
    ({"module_line": "Lmod has detected the following error: unknown module tf-hpc-course/2026.11"}, "should load the module"),
    ({"tensorflow_from": "/home/learner/.local/lib/python3.11/site-packages/tensorflow/__init__.py"},
     "from the module's environment"),  # a pip --user TensorFlow in the way
    # a sibling environment whose path starts with the module's (.venv-gpu beside .venv): not the module's
    ({"tensorflow_from": f"{_SIBLING_SITE_17}/tensorflow/__init__.py"}, "from the module's environment"),
    ({"keras_from": f"{_SIBLING_SITE_17}/keras/__init__.py"}, "from the module's environment"),
    ({"einops_from_module": True}, "own einops should win"),  # the venv's own einops shadowed
    ({"other": {"tensorflow": f"{_MODULE_SITE_17}/tensorflow/__init__.py", "keras": f"{_MODULE_SITE_17}/keras/__init__.py",
                "einops": None}}, "should not be handed"),  # PYTHONPATH leaks: the module's packages, where the module has them
    # tenth review, finding 6: the system's Python with an einops of its own (Debian's python3-einops, say), not the module's:
    # it failed the proof before ('should not be handed': found anywhere counted); a sibling environment's is not the module's
    ({"other": {"tensorflow": None, "keras": None, "einops": "/usr/lib/python3/dist-packages/einops/__init__.py"}}, None),
    ({"other": {"tensorflow": f"{_SIBLING_SITE_17}/tensorflow/__init__.py", "keras": None, "einops": None}}, None),
    ({"pythonpath": True}, "no PYTHONPATH"),  # the module on PYTHONPATH: its packages ahead of the venv's
    ({"user_site": True}, "no user site-packages"),  # the job read ~/.local (no PYTHONNOUSERSITE=1)
    ({"unloaded": {"tensorflow": _MODULE_TF_17, "EBPYTHONPREFIXES": ""}}, "after module unload"),  # not through the module
    ({"ebonly": {"tensorflow": None}}, "only EBPYTHONPREFIXES"),  # a .pth reader of another variable
    # tenth review's fix, leftovers: a system-wide TensorFlow is not the module's. After the unload it failed the old proof
    # (found anywhere counted); found with EBPYTHONPREFIXES alone (a reader of another variable) it passed; so did a sibling's
    ({"unloaded": {"tensorflow": _SYSTEM_TF_17, "EBPYTHONPREFIXES": ""}}, None),
    ({"ebonly": {"tensorflow": _SYSTEM_TF_17}}, "only EBPYTHONPREFIXES"),
    ({"ebonly": {"tensorflow": f"{_SIBLING_SITE_17}/tensorflow/__init__.py"}}, "only EBPYTHONPREFIXES"),
    ({"ebonly": None}, "only EBPYTHONPREFIXES"),  # the job never printed that line
    ({"setuptools_from_module": True}, "setuptools"),  # on Python 3.11 the build took the module's: not as said
    ({"runs": {"Keras 3": [{}, {"fit": "ok", "weights": "c"}]}}, "should fail without the fix"),  # one worker fitted
    ({"runs": {"Keras 3 + fix": [{}, {"weights": "a2"}]}}, "identical weights"),
    # twenty-first review, finding 1: a fit that trained nothing (SGD(0.0)) ends with identical weights by construction
    # (MWMS starts every worker from worker 0's values), its fit ok: passed the old proof
    ({"runs": {"Keras 3 + fix": [{"moved": False}, {"moved": False}]}}, "fit should change the weights"),
    ({"runs": {"Keras 2 (tf_keras)": [{"moved": False}, {"moved": False}]}}, "fit should change the weights"),
    # finding 3: on Slurm both workers of a run on one node (one per node was stated, never asserted): passed before
    ({"runs": {"Keras 2 (tf_keras)": [{"host": "node1"}, {"host": "node1"}]}}, "one per node"),
    ({"runs": {"Keras 2 (tf_keras)": [{}, {"imported": "keras"}]}}, "from tensorflow.keras import"),
    ({"runs": {"Keras 2 (tf_keras)": [{}]}}, "every variant"),  # one worker's report lost
    # tenth review, finding 1: every worker ran alone (rank 0, one replica each): 2 reports a variant passed the old count
    ({"runs": dict.fromkeys(("Keras 3", "Keras 3 + fix", "Keras 2 (tf_keras)"), [{"rank": 0, "replicas": 1}] * 2)},
     "every variant should run on 2 workers, ranks 0 to 1"),
    ({"runs": {"Keras 3 + fix": [{}, {"rank": 0}]}}, "every variant should run on 2 workers, ranks"),  # two rank 0s, one cluster
    ({"runs": {"Keras 2 (tf_keras)": [{"replicas": 1}, {"replicas": 1}]}}, "one cluster"),  # ranks right, each its own cluster
    ({"gpus_given": (', "NoDevFiles"', '')}, "count the GPUs"),  # the pre-flight's parse counts Slurm's NoDevFiles
    # 29th review, finding 1: entries after one naming none counted one by one ("-1,0" counted 1, where CUDA sees none)
    ({"gpus_given": ('len(list(itertools.takewhile(lambda d: d.strip() not in ("", "-1", "NoDevFiles"), entries)))',
                     'len([d for d in entries if d.strip() not in ("", "-1", "NoDevFiles")])')}, "count the GPUs"),
    # twelfth review, finding 1: CUDA_VISIBLE_DEVICES unset, SLURM_GPUS_ON_NODE not read (the old count: none given) ...
    ({"gpus_given": ("int(on_node) if on_node.isdigit() else ", "")}, "count the GPUs"),
    # ... or read first, as gpucheck's batch step does: a task bound to 1 of its node's 4 GPUs counted 4
    ({"gpus_given": ('if "CUDA_VISIBLE_DEVICES" in environ:',
                     'if "CUDA_VISIBLE_DEVICES" in environ and "SLURM_GPUS_ON_NODE" not in environ:')}, "count the GPUs"),
    # fourteenth review, finding 2: in a Slurm job given no GPU, the node's GPUs nvidia-smi lists counted as given
    ({"gpus_given": ('(0 if "SLURM_JOB_ID" in environ else listed())', "listed()")}, "count the GPUs"),
    # lesson 17's fourth review, finding 1: a node without /usr/bin/python3 (the job says so) is not a failure; no line is
    ({"other": None, "no_other": "no /usr/bin/python3 on node1: no other Python to ask"}, None),
    ({"other": None}, "should not be handed"),
    # finding 5: the standard library after the site directories (EasyBuild's move), or not on the path at all
    ({"stdlib_last": True}, "standard library"),
    ({"stack_changes": {"stdlib": "/opt/python/lib/python3.11"}}, "standard library"),
    # finding 10: the job was handed no PYTHONPATH (nothing to drop: true by construction), or kept it on its path
    ({"handed": ""}, "handed your PYTHONPATH"),
    ({"handed": None}, "handed your PYTHONPATH"),
    ({"yours_on_path": True}, "handed your PYTHONPATH"),
    # fifth review, finding 1: `python` after the load another one (pyenv's shim, the module's PATH line lost), or the venv
    # made from another 3.11 (its base_prefix not the kernel's): both passed before
    ({"job_python": "/root/.pyenv/shims/python"}, "`python` should be the module's"),
    ({"job_python": None}, "`python` should be the module's"),
    ({"stack_changes": {"base_prefix": "/root/.pyenv/versions/3.11.7"}}, "made from a Python under this kernel's installation prefix"),
    # sixth review, finding 1: `python` was this kernel's before the load too (a login shell that kept a PATH with the venv's
    # bin/ first): the module did not put it there; no PYTHON_BEFORE line proves nothing; another Python before is the case
    ({"python_before": f"{sys.prefix}/bin/python"}, "`python` should be the module's"),
    ({"python_before": None}, "`python` should be the module's"),
    ({"python_before": "/usr/bin/python"}, None),
    # finding 2: the build's bdist_wheel from a wheel of the venv's own, not the module's
    ({"wheel_in_venv": True}, "bdist_wheel should come from the module"),
    # nineteenth review, finding 1: setup.py found the module's bdist_wheel, but another command built the wheel (its
    # WHEEL file's Generator line: setuptools.setup(cmdclass={"bdist_wheel": ...}), or another wheel's): passed before
    ({"stack_changes": {"wheel_generator": "mybuilder (1.0)"}}, "bdist_wheel should come from the module"),
    ({"stack_changes": {"wheel_generator": "bdist_wheel (0.42.0)"}}, "bdist_wheel should come from the module"),
    ({"stack_changes": {"wheel_generator": None}}, "bdist_wheel should come from the module"),
    # finding 4: the node's `module` is Tcl Environment Modules: NOT CHECKED, not a failure
    ({"stack": None, "log": "NO_LMOD 'module' on node1 is not Lmod: Modules Release 5.2.0 (2022-11-08)\n"}, None),
    ({"stack": None, "log": "NO_LMOD\n"}, "should load the module"),  # a line without its reason proves nothing
    # seventh review, finding 1: the venv made by /usr/bin/python3 -m venv (its base /usr, the module's too: passed before),
    # or a pyvenv.cfg without the command line Python 3.11+ writes
    ({"made_by": "/usr/bin/python3"}, "made by the module's `python`"),
    ({"made_by": ""}, "made by the module's `python`"),
    # issues 51/54, finding 1: the course's Python made from a Python EasyBuild built, whose sitecustomize.py moves the
    # Python's own entries (the standard library among them) last: that order passes (it failed 'standard library' before);
    # EasyBuild's script reported but the standard library first, or not among the moved entries; its order without it
    ({"easybuild": True}, None),
    ({"stack_changes": {"easybuild_sitecustomize": True}}, "EasyBuild's sitecustomize.py should"),
    ({"easybuild": True, "stack_changes": {"stdlib": "/opt/python/lib/python3.11"}}, "EasyBuild's sitecustomize.py should"),
    ({"easybuild": True, "stack_changes": {"easybuild_sitecustomize": False}}, "standard library should come before"),
    # seventeenth review: on a Python EasyBuild built, the job's venv without the .pth reader (its sitecustomize.py reads
    # EBPYTHONPREFIXES and leaves the same order): passed before, the reader's own list of what it added now tells
    ({"easybuild": True, "reader_ran": False}, "the venv should be --system-site-packages with the .pth reader")],
    ids=["as run", "no stack", "module unknown", "user-site tensorflow", "sibling env tensorflow", "sibling env keras",
         "einops shadowed", "other python handed", "its own einops", "a sibling env's tensorflow",
         "pythonpath", "user site read", "found after unload", "not with ebpythonprefixes alone",
         "a system tensorflow after unload", "a system tensorflow with ebpythonprefixes alone",
         "a sibling env's tensorflow with ebpythonprefixes alone", "no ebonly line", "module's setuptools",
         "keras 3 fitted on one", "fix weights apart", "fix trained nothing", "tf_keras trained nothing",
         "two workers on one node", "from-import keras 3", "worker missing", "every worker rank 0 alone",
         "two rank 0s", "each worker its own cluster",
         "NoDevFiles counted", "entries after -1 counted", "slurm_gpus_on_node not read", "slurm_gpus_on_node first", "slurm_job_id not read",
         "no system python: not checked", "no other line", "stdlib last", "stdlib not on the path",
         "pythonpath not handed", "no handed line", "pythonpath kept", "python not the module's", "no python line",
         "venv from another python", "python the kernel's before the load", "no python-before line", "another python before",
         "bdist_wheel from the venv", "another builder in the wheel file", "another wheel's bdist_wheel",
         "no generator line", "node without lmod: not checked", "no_lmod without a reason", "venv by /usr/bin/python3",
         "no command line", "easybuild's order", "easybuild's script, stdlib first", "easybuild's script, stdlib elsewhere",
         "easybuild's order, no script", "easybuild's order, no reader"])
def test_lesson_17_gathering_cell_reads_the_jobs_stack_and_keras_reports(tmp_path, changes, match):
    """From the job's raw log (module list, HANDED, STACK and OTHER lines) and the workers' KERAS reports:
    each broken raw line must fail the proof through the gathering cell."""
    holds_unless(match, gather_and_prove, "17_software_stack.ipynb", _gathering_namespace_17(tmp_path, changes))


def test_lesson_17_on_a_node_without_the_system_python_says_not_checked_and_why(tmp_path):
    """Lesson 17's fourth review, finding 1: the OTHER line needs /usr/bin/python3 on the node. Where the job printed
    NO_OTHER instead, the proof passes and prints NOT CHECKED with the job's reason; on the lesson before the review
    it failed ('should not be handed')."""
    said = []
    reason = "no /usr/bin/python3 on node1: no other Python to ask"
    namespace = {**_gathering_namespace_17(tmp_path, {"other": None, "no_other": reason}),
                 "print": lambda *a, **k: said.append(" ".join(map(str, a)))}
    gather_and_prove("17_software_stack.ipynb", namespace)
    assert f"NOT CHECKED (another Python in the job): {reason}" in said, said


def _gathering_namespace_17(tmp_path: Path, changes: dict) -> dict:
    """What lesson 17's gathering cell reads, from a planted job log (`changes` break one part of it) and planted
    KERAS reports, parsed as the lesson parses them."""
    import json

    job_dir = tmp_path / "software_stack"
    stack = _stack_17(job_dir, **{k: v for k, v in changes.items() if k in ("pythonpath", "einops_from_module", "tensorflow_from",
                                                                             "keras_from", "setuptools_from_module", "user_site",
                                                                             "stdlib_last", "yours_on_path", "wheel_in_venv",
                                                                             "made_by", "easybuild", "reader_ran")})
    stack = changes.get("stack", {**stack, **changes.get("stack_changes", {})})
    other = changes.get("other", {"tensorflow": None, "keras": None, "einops": None})  # where /usr/bin/python3 finds each
    unloaded = changes.get("unloaded", {"tensorflow": None, "EBPYTHONPREFIXES": ""})  # where the venv finds TensorFlow
    ebonly = changes.get("ebonly", {"tensorflow": _MODULE_TF_17})
    handed = changes.get("handed", str(job_dir / "your-pythonpath"))
    job_python = changes.get("job_python", f"{sys.prefix}/bin/python")  # `command -v python` after the load
    python_before = changes.get("python_before", "")  # `command -v python` before it: none
    stack_log = changes.get("log") or ((f"HANDED PYTHONPATH={handed}\n" if handed is not None else "")
                                       + (f"PYTHON_BEFORE {python_before}\n" if python_before is not None else "")
                                       + f"Currently Loaded Modules:\n  {changes.get('module_line', '1) tf-hpc-course/2026.11')}\n\n"
                                       + (f"PYTHON {job_python}\n" if job_python is not None else "")
                                       + (f"STACK {json.dumps(stack)}\n" if stack else "") + (f"OTHER {json.dumps(other)}\n" if other else "")
                                       + (f"NO_OTHER {changes['no_other']}\n" if "no_other" in changes else "")
                                       + f"UNLOADED {json.dumps(unloaded)}\n" + (f"EBONLY {json.dumps(ebonly)}\n" if ebonly else ""))
    lines = [f"KERAS {json.dumps({**r, 'asked': '2' if 'tf_keras' in name else '3', 'fix': 'fix' in name})}"
             for name, reports in _keras_runs_17(**changes.get("runs", {})).items() for r in reports]
    keras_log = "\n".join(["I0000 00:00 some TensorFlow start-up line", *lines, ""])  # the job's log, as written
    keras_runs = {"keras_log": keras_log, "json": json}
    for name in ("variants", "runs", "by_variant"):  # the KERAS lines parsed as lesson 17 parses them
        exec(assignment_source("17_software_stack.ipynb", name), keras_runs)
    namespace = {"stack": stack, "stack_log": stack_log, "job_dir": job_dir, "by_variant": keras_runs["by_variant"],
                 "module_einops": "0.8.2", "build": {"is_cuda_build": False}, "gpus_here": 0, "gpus_tf_sees": 0,
                 "where": "Slurm job 7", "lmod_here": changes.get("lmod_here", True), "lmod_why": changes.get("lmod_why", ""),
                 "use_slurm": changes.get("use_slurm", True), "NODES": 2,
                 "your_pythonpath": job_dir / "your-pythonpath",
                 **{m: __import__(m) for m in ("itertools", "json", "os", "sys", "sysconfig")}, "Path": Path}  # the lesson's imports
    for marker in ("other_python = next(", "fit_ended = ", "ranks = {name"):  # the cells reading the job's lines, the reports
        exec(_cell_17(marker), namespace)
    exec(function_source("17_software_stack.ipynb", "preflight_problems"), namespace)
    exec(function_source("17_software_stack.ipynb", "gpus_listed"), namespace)
    exec(function_source("17_software_stack.ipynb", "gpus_given").replace(*changes.get("gpus_given", ("", ""))), namespace)
    return namespace


def _said_lines() -> tuple[list[str], object]:
    """A `print` for a cell that keeps each printed line (its `sep` and `end` as print has them)."""
    said = []

    def keep(*args, sep=" ", end="\n", **_):
        said.extend((sep.join(map(str, args)) + end).splitlines())
    return said, keep


def test_lesson_17_before_python_3_11_which_python_made_the_venv_is_not_checked(tmp_path):
    """Lesson 17's seventh review, finding 1: only pyvenv.cfg's `command` line (written by Python 3.11 and later) tells a
    venv made by the module's `python` from one made by /usr/bin/python3, both with base /usr. Before 3.11 there is no such
    line: the proof passes and says NOT CHECKED, with why (on 3.11+ the same pyvenv.cfg fails it: 'no command line')."""
    said, keep = _said_lines()
    old = SimpleNamespace(prefix=sys.prefix, base_prefix=sys.base_prefix, version_info=(3, 10, 14))
    gather_and_prove("17_software_stack.ipynb", {**_gathering_namespace_17(tmp_path, {"made_by": ""}), "sys": old, "print": keep})
    assert "NOT CHECKED (which python made the venv: Python before 3.11 records none in its pyvenv.cfg)" in said, said


@pytest.mark.parametrize("submit,startup", [(True, 60.0), (False, 40.0)], ids=["slurm", "this machine"])
def test_lesson_17_start_up_counts_job_starts_on_slurm_only_and_not_solution_1(monkeypatch, submit, startup):
    """Lesson 17's seventh review, finding 3: the set-up predicted 85 s of start-up wherever it ran: 20 s of job starts
    where no job runs (no Slurm), and solution 1's five programs (25 s), which run after the lesson's time is taken.
    Five TensorFlow starts, three first steps, and the two jobs' starts on Slurm only."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("COURSE_MODE", "quick")
    namespace = {"MODE": None, "NODES": 2, "SUBMIT_TO_SLURM": submit}
    exec(_cell_17("stopwatch = time_lesson("), namespace)
    assert namespace["stopwatch"].startup_s == pytest.approx(startup), namespace["stopwatch"].startup_s
    assert namespace["use_slurm"] is submit


def test_lesson_17_the_job_log_is_shown_in_whole_lines_the_stack_one_entry_a_line(tmp_path):
    """Lesson 17's seventh review, finding 2: the cell showed the log's last 2,000 characters, and on Slurm (a STACK line
    of about 1,900) the HANDED line the prose points to was cut off. Every line is shown whole, the STACK line one
    entry a line."""
    import json

    stack = _stack_17(tmp_path / "software_stack")
    stack["sys_path"] += [f"/opt/site/{i}/lib/python3.11/site-packages" for i in range(30)]  # a long path, as a centre's
    handed = f"HANDED PYTHONPATH={tmp_path}/software_stack/your-pythonpath"
    log = f"{handed}\nPYTHON_BEFORE \nCurrently Loaded Modules:\n  1) tf-hpc-course/2026.11\n\nSTACK {json.dumps(stack)}\n" \
          'UNLOADED {"tensorflow": null, "EBPYTHONPREFIXES": ""}\n'
    assert len(log) > 2200, len(log)
    said, keep = _said_lines()
    namespace = {"use_slurm": True, "where": "Slurm job 7", "added": [], "stack_log": log, "print": keep}
    exec(_stack_job_cells_17()[1], namespace)
    assert said[1] == handed and said[-1].startswith("UNLOADED "), said[:3]
    assert all(f"  {key}: {json.dumps(value)}" in said for key, value in stack.items()), said


def test_lesson_17_the_gathering_prints_one_finding_a_line(tmp_path):
    """Lesson 17's seventh review, finding 4: the gathering cell printed the stack job's findings as one line of about
    1,500 characters. Each finding now has its line, under its group (stack job, Keras runs, pre-flight)."""
    said, keep = _said_lines()
    gather_and_prove("17_software_stack.ipynb", {**_gathering_namespace_17(tmp_path, {}), "print": keep})
    assert {"stack job:", "Keras runs:", "pre-flight:"} <= set(said) and max(map(len, said)) <= 200, \
        sorted(said, key=len)[-1][:300]


def test_lesson_17_keras_3_asked_is_keras_3_with_tf_use_legacy_keras_inherited(tmp_path, report):
    """Lesson 17, ninth review (issues 51/54), finding 5: a shell or job that exported TF_USE_LEGACY_KERAS=1 (a Keras 2
    project's setting) hands it to `keras_versions.py`, and `--keras 3` then ran tf_keras. The take-home program drops the
    variable before `import tensorflow` when Keras 3 is asked: run alone (one worker, where fit works), it reports Keras 3
    at tf.keras's first use and at `from tensorflow.keras import`."""
    import json

    from helpers.take_home import copy_beside

    copy_beside(tmp_path)  # mwms_slurm.py, as the lesson puts it beside the program
    program = tmp_path / "keras_versions.py"
    program.write_text(next(text for name, text in written_programs("17_software_stack.ipynb").items()
                            if name.endswith('"keras_versions.py"}')))
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("SLURM_")} | \
        {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, str(program), "--keras", "3"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    reports = [json.loads(l[6:]) for l in done.stdout.splitlines() if l.startswith("KERAS ")]
    report(f"lesson 17's keras_versions.py --keras 3 with TF_USE_LEGACY_KERAS=1 inherited: "
           f"{[(r['module'], r['keras'], r['imported'], r['fit']) for r in reports]}")
    assert [(r["module"], r["keras"].split(".")[0], r["imported"]) for r in reports] == [("keras", "3", "keras")], \
        (done.stdout + done.stderr)[-2000:]


_NVIDIA_SMI_17 = "GPU 0: NVIDIA A100 (UUID: GPU-1)\n  MIG 1g.5gb Device 0: (UUID: MIG-1)\nGPU 1: NVIDIA A100 (UUID: GPU-2)\n"


_CPU_BUILD_SAID_17 = "NO-GO: GPUs on this node (given, or listed by nvidia-smi) but TensorFlow is a CPU build"


@pytest.mark.parametrize("environ,listed,said", [
    ({"SLURM_GPUS_ON_NODE": "2"}, None, _CPU_BUILD_SAID_17),  # alone: gres.conf's Flags=no_gpu_env, say
    ({}, _NVIDIA_SMI_17, _CPU_BUILD_SAID_17),  # GPUs Slurm does not manage
    ({}, None, "GO (no GPU given here"),  # a CPU node: no nvidia-smi, nothing set
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, None, _CPU_BUILD_SAID_17),
], ids=["slurm_gpus_on_node only", "nvidia-smi lists 2", "cpu node", "cuda_visible_devices"])
def test_lesson_17_pre_flight_stops_a_cpu_build_where_cuda_visible_devices_is_unset(monkeypatch, tmp_path, environ, listed,
                                                                                    said):
    """Lesson 17's twelfth review, finding 1: the pre-flight counted the GPUs given only from CUDA_VISIBLE_DEVICES, so
    where it is unset (SLURM_GPUS_ON_NODE=2 alone: gres.conf's Flags=no_gpu_env, or the job unset it; GPUs Slurm does
    not manage, which nvidia-smi -L lists) a CPU build printed GO. The lesson's own cells (TensorFlow a planted CPU build
    that sees no GPU), in order: the count falls back as gpucheck's does, and the rule says NO-GO."""
    said_lines = _preflight_said_17(monkeypatch, tmp_path, environ, listed, cuda_build=False, seen=0)
    assert said_lines and said_lines[-1].startswith(said), said_lines


@pytest.mark.parametrize("environ,seen,said", [
    ({"SLURM_GPUS_ON_NODE": "2"}, 4, "NO-GO: TensorFlow sees 4 GPUs, the job was given 2: nothing hides the others "
                                     "(no CUDA_VISIBLE_DEVICES)"),
    ({"SLURM_GPUS_ON_NODE": "2"}, 1, "NO-GO: TensorFlow sees 1 of the 2 GPUs on this node (given, or listed by "
                                     "nvidia-smi): check CUDA libraries and driver"),
    ({"SLURM_GPUS_ON_NODE": "2"}, 2, "GO"),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, 2, "GO"),
], ids=["sees 4 of 2", "sees 1 of 2", "sees 2 of 2", "cuda_visible_devices, sees 2"])
def test_lesson_17_pre_flight_says_why_a_cuda_build_sees_more_or_fewer_gpus_than_given(monkeypatch, tmp_path, environ, seen,
                                                                                      said):
    """Lesson 17's thirteenth review, finding 1: the rule (seen != given) blamed the CUDA libraries for a node that sees
    MORE GPUs than given, where nothing hides the node's others (SLURM_GPUS_ON_NODE alone, no CUDA_VISIBLE_DEVICES:
    gres.conf's Flags=no_gpu_env, or the job unset it) and a good CUDA build sees them all. The lesson's cells, a planted
    CUDA build seeing `seen`."""
    said_lines = _preflight_said_17(monkeypatch, tmp_path, environ, None, cuda_build=True, seen=seen)
    assert said_lines and said_lines[-1].split(";")[0].strip() == said, said_lines


@pytest.mark.parametrize("cuda_build,seen,said", [
    (False, 0, "GO (no GPU given here"),
    (True, 2, "NO-GO: TensorFlow sees 2 GPUs, the job was given 0: nothing hides the others (no CUDA_VISIBLE_DEVICES); "
              "it would use GPUs the job was not given, which other jobs may hold (or your centre gives its GPUs out "
              "without Slurm: ask it)"),
], ids=["cpu build", "cuda build sees the node's 2"])
def test_lesson_17_pre_flight_in_a_job_given_no_gpu_counts_none(monkeypatch, tmp_path, cuda_build, seen, said):
    """Lesson 17's fourteenth review, finding 2: inside a Slurm job (SLURM_JOB_ID set) given no GPU, on a GPU node whose
    nvidia-smi lists its 2, the pre-flight counted those 2 as given: a CPU build (right for a CPU job) got NO-GO, a CUDA
    build using the node's GPUs GO. In a job only CUDA_VISIBLE_DEVICES or SLURM_GPUS_ON_NODE count (else none); a CUDA
    build that sees GPUs there is stopped. The lesson's cells, a planted build seeing `seen`."""
    said_lines = _preflight_said_17(monkeypatch, tmp_path, {"SLURM_JOB_ID": "1"}, _NVIDIA_SMI_17, cuda_build, seen)
    assert said_lines and said_lines[-1].startswith(said), said_lines


def _preflight_said_17(monkeypatch, tmp_path: Path, environ: dict, listed: str | None, cuda_build: bool,
                       seen: int) -> list[str]:
    """What lesson 17's pre-flight cells print, in order, on a node with `environ` set (the GPU variables otherwise unset),
    an nvidia-smi listing `listed` (None: none on PATH), and a planted TensorFlow build that sees `seen` GPUs."""
    import helpers.host

    for name in ("CUDA_VISIBLE_DEVICES", "SLURM_GPUS_ON_NODE", "GPU_DEVICE_ORDINAL", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "bin").mkdir()
    if listed is not None:  # the node's nvidia-smi; none on a CPU node
        (tmp_path / "bin" / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '%s' '{listed}'\n")
        (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    build = SimpleNamespace(sysconfig=SimpleNamespace(get_build_info=lambda: {"is_cuda_build": cuda_build}),
                            config=SimpleNamespace(list_physical_devices=lambda kind: [kind] * seen), __version__="2.21.0")
    monkeypatch.setattr(helpers.host, "import_tensorflow", lambda: build)
    markers = ("tf = import_tensorflow()", "def gpus_listed(", "def gpus_given(", "problems = preflight_problems(")
    cells = list(dict.fromkeys(c.source for c in nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
                               if c.cell_type == "code" and any(m in c.source for m in markers)))
    said_lines, keep = _said_lines()
    namespace = {"os": os, "print": keep}
    for cell in cells:
        exec(cell, namespace)
    return said_lines


def test_lesson_17_names_every_lazy_loader_that_reads_tf_use_legacy_keras_again():
    """Lesson 17's twelfth review, finding 2: the lesson said TF_USE_LEGACY_KERAS is read again at the first use of five
    lazy loaders (tf.keras, .losses, .metrics, .optimizers, .initializers); TensorFlow 2.21 has more (tf.compat.v1's keras,
    layers and nn.rnn_cell; tf.compat.v2's five). Every KerasLazyLoader the installed TensorFlow puts in tf, tf.compat.v1,
    tf.compat.v1.nn and tf.compat.v2 (the nested compat modules' copies left out, as the lesson says) is named in the cell."""
    import re

    program = ("import sys, tensorflow\nfrom tensorflow.python.util.lazy_loader import KerasLazyLoader\n"
               "where = {'tensorflow': 'tf', 'tensorflow._api.v2.compat.v1': 'tf.compat.v1',\n"
               "         'tensorflow._api.v2.compat.v1.nn': 'tf.compat.v1.nn', 'tensorflow._api.v2.compat.v2': 'tf.compat.v2'}\n"
               "print(sorted(f'{where[m]}.{k}' for m in where for k, v in vars(sys.modules[m]).items()\n"
               "             if type(v) is KerasLazyLoader and not k.startswith('_')))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    found = set(eval(done.stdout.strip().splitlines()[-1]))
    cell = next(c.source for c in nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
                if "lazy_loader.py" in c.source)
    named = set(re.findall(r"`(tf\.(?!compat\.v1\.compat)[\w.]+)`", cell.split("lazy_loader.py", 1)[1].split("nested", 1)[0]))
    assert len(found) == 13 and named == found, (sorted(found - named), sorted(named - found))


def test_lesson_17_the_local_job_log_keeps_stdout_and_stderr_in_order(tmp_path):
    """Lesson 17's twelfth review, finding 3: without Slurm the stack job's log was its stdout, then its stderr, so bash's
    `time` lines (MADE, INSTALLED: on stderr) came after every line printed after them. The job's cell run for real on a
    script that prints to stdout, has `time` print to stderr, and prints again: the log keeps that order, as a job's .out."""
    (tmp_path / "stack.sbatch").write_text('#!/bin/bash -l\necho "BEFORE"\nTIMEFORMAT="MADE the venv in %1R s"\n'
                                           'time true\necho "AFTER"\n')
    namespace = {"use_slurm": False, "lmod_here": True, "job_dir": tmp_path, "settings_env": {}}
    exec(_stack_job_cells_17()[0], namespace)
    order = [l.split()[0] for l in namespace["stack_log"].splitlines() if l.split() and l.split()[0] in ("BEFORE", "MADE", "AFTER")]
    assert order == ["BEFORE", "MADE", "AFTER"], namespace["stack_log"][-1000:]


def _dist_info_17(directory: Path, name: str, found: str | None) -> None:
    """A distribution's metadata in `directory` (a site-packages), as pip leaves it; none where `found` is None."""
    directory.mkdir(parents=True, exist_ok=True)
    if found:
        (directory / f"{name}-{found}.dist-info").mkdir()
        (directory / f"{name}-{found}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {found}\n")


@pytest.mark.parametrize("inside,outside,match", [
    ("0.8.2", None, None),
    # twentieth review, finding 3: an einops only outside the module's site-packages (a PYTHONPATH's, on the kernel's
    # sys.path): the old cell searched the whole sys.path and took it for the module's (DID NOT RAISE)
    (None, "0.8.2", "own einops should win"),
    # ... and one ahead of the module's on sys.path: the old cell took it (99.0) for the module's, and the proof failed
    ("0.8.2", "99.0", None)],
    ids=["the module's", "only outside the module", "another ahead of the module's"])
def test_lesson_17_the_module_s_einops_is_looked_up_in_its_site_packages(tmp_path, monkeypatch, inside, outside, match):
    """The cell that looks up the module's einops reads the module's site-packages (this kernel's purelib, planted here),
    not whatever the kernel's sys.path holds; the proof then runs on what it found."""
    module_site, elsewhere = tmp_path / "module-site", tmp_path / "pythonpath"
    _dist_info_17(module_site, "einops", inside)
    _dist_info_17(elsewhere, "einops", outside)
    monkeypatch.syspath_prepend(str(elsewhere))
    namespace = {**_gathering_namespace_17(tmp_path, {}), "print": lambda *a, **k: None}
    paths = sysconfig.get_paths()
    with monkeypatch.context() as planted:
        planted.setattr(sysconfig, "get_paths", lambda *a, **k: {**paths, "purelib": str(module_site)})
        exec(_cell_17("module_einops = next("), namespace)
    holds_unless(match, gather_and_prove, "17_software_stack.ipynb", namespace)
    assert namespace["module_einops"] == inside, namespace["module_einops"]  # the module's, or none


@pytest.mark.parametrize("builder,generator", [("wheel", "bdist_wheel (77.0)"), ("setuptools", "setuptools (77.0)")])
def test_lesson_17_the_module_s_bdist_wheel_is_looked_up_in_its_site_packages(tmp_path, monkeypatch, builder, generator):
    """Twentieth review, finding 3: the WHEEL file's Generator line must name a builder in the module's site-packages; a
    wheel (or a setuptools 70.1+) found only elsewhere on the kernel's sys.path (a PYTHONPATH's) passed the old gathering
    cell, which searched the whole sys.path (DID NOT RAISE)."""
    _dist_info_17(tmp_path / "pythonpath", builder, "77.0")
    monkeypatch.syspath_prepend(str(tmp_path / "pythonpath"))
    holds_unless("bdist_wheel should come from the module", gather_and_prove, "17_software_stack.ipynb",
                 _gathering_namespace_17(tmp_path, {"stack_changes": {"wheel_generator": generator}}))


def test_lesson_17_s_kernel_import_shows_nothing_of_the_import_at_any_level():
    """Cell 44: the kernel's `import_tensorflow` sends what TensorFlow writes to stderr during its import to /dev/null,
    so `TF_CPP_MIN_LOG_LEVEL=0` in the kernel shows none of it, where a plain `import tensorflow` at that level prints
    TensorFlow's INFO lines (oneDNN's, from port.cc): the plain `python -c` command is the one to use."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}
    plain = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True, text=True, timeout=300,
                           env=env)
    kernel = subprocess.run([sys.executable, "-c", "from helpers.host import import_tensorflow; import_tensorflow()"],
                            capture_output=True, text=True, timeout=300, env=env, cwd=NOTEBOOKS.parent)
    assert plain.returncode == 0 and kernel.returncode == 0, plain.stderr[-1000:] + kernel.stderr[-1000:]
    assert "port.cc" in plain.stderr, plain.stderr[-1000:]  # the plain import at level 0 shows TensorFlow's lines
    assert kernel.stderr.strip() == "", kernel.stderr[-1000:]
