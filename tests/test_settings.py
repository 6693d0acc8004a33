"""Every COURSE_* setting declared once (helpers/settings.py): used names declared, reads routed, docs equal.

The repository is scanned as it is: a `COURSE_*` name anywhere in the code, scripts, notebooks,
tests, Makefile or CI that the table does not declare fails; so does a Python read of a
`COURSE_*` variable that goes around the table (outside the files listed, with their reason, in
NOT_ROUTED); so does docs/settings.md when it differs from the table.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import pytest

from helpers.class_settings import CLASS_SETTINGS, check_setting, class_settings
from helpers.errors import CourseError
from helpers.settings import SCOPES, SETTINGS, Setting, check_class_value, source, text, value
from helpers.commands.settings_report import checker, markdown
from tests.conftest import run_cli, run_python
from tests.support.notebooks import notebook_python

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("helpers", "course_server", "course_hub", "slurm", "notebooks", "tests", "Makefile", ".ci", "conftest.py", "pyproject.toml")
FAKE = "COURSE" + "_"  # the made-up names below are built, so the scan of this file does not find them
NAME = re.compile(r"(?<![A-Za-z0-9_])COURSE_[A-Z0-9_]+")
# names that are not settings but a part of one, each with its reason
NOT_NAMES: dict[str, str] = {}  # none now: the prefix test_gpu_class_day's sbatch copy dropped went with it
# Python files whose COURSE_* reads do not go through helpers.settings yet, each with its reason
NOT_ROUTED = {
    "tests/": "the tests set and read settings to drive the code under test (their own are declared, scope test)",
    "conftest.py": "the nbval pass's hooks read the test settings COURSE_NBVAL_KEEP and COURSE_NBVAL_SLURM",
    "course_server/pull.py": "a package of its own: importing helpers drops the hub's token, which its server needs",
    "helpers/take_home/": "take-home files a lesson copies beside its job program: they import nothing of the course",
}
# in notebooks, the %%writefile cells: the take-home programs a lesson writes for a job import nothing
# from the course, so they read the environment themselves


@functools.cache
def _files() -> tuple[Path, ...]:
    found = []
    for entry in SCANNED:
        path = ROOT / entry
        found += [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()
                                                 and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    return tuple(found)


def names_in(text_: str) -> set[str]:
    """The COURSE_* names in `text_`; a name ending in `_` is a family's prefix (COURSE_SLURM_{field})."""
    return set(NAME.findall(text_))


def undeclared(names: set[str]) -> set[str]:
    """Names neither declared nor a prefix of declared ones (`COURSE_SLURM_`) nor listed in NOT_NAMES."""
    return {n for n in names if n not in SETTINGS and n not in NOT_NAMES
            and not (n.endswith("_") and any(s.startswith(n) for s in SETTINGS))}


def test_every_course_name_used_anywhere_is_declared():
    used: dict[str, set[str]] = {}
    for path in _files():
        for name in names_in(path.read_text(errors="replace")):
            used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert len(used) >= 60, f"the scan found only {len(used)} names: is it reading the repository?"
    missing = {name: sorted(used[name]) for name in undeclared(set(used))}
    assert not missing, f"COURSE_* names used but not declared in helpers/settings.py: {missing}"
    assert undeclared({FAKE + "NOT_A_SETTING", "COURSE_SLURM_", "COURSE_MODE"}) == {FAKE + "NOT_A_SETTING"}
    stale = sorted(set(NOT_NAMES) - set(used))  # an exception for a name nothing uses any more would hide its return
    assert not stale, f"NOT_NAMES lists names no scanned file uses: {stale}"


@functools.cache
def _constants() -> dict[str, str]:
    """Module-level NAME = "COURSE_..." assignments in the scanned Python: what a read by NAME reads."""
    found = {}
    for path in _files():
        if path.suffix == ".py":
            for node in ast.parse(path.read_text()).body:
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                        and isinstance(node.value.value, str) and node.value.value.startswith("COURSE_")):
                    found.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return found


def _key(node: ast.AST, constants: dict[str, str]) -> str | None:
    """The COURSE_* name an expression stands for: a string, an f-string starting with one, a constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if node.value.startswith("COURSE_") else None
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return node.values[0].value if str(node.values[0].value).startswith("COURSE_") else None
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return constants.get(name) if name else None


def _is_environment(node: ast.AST) -> bool:
    """os.environ, an `env`/`environ` mapping, process.environ(), or `(os.environ if ... else env)`."""
    if isinstance(node, ast.IfExp):
        return _is_environment(node.body) or _is_environment(node.orelse)
    if isinstance(node, ast.Call):
        node = node.func
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name in ("environ", "env", "environment")


def direct_reads(source_: str, constants: dict[str, str]) -> list[tuple[int, str]]:
    """(line, name) of each read of a COURSE_* variable from the environment that is not through the table.

    Static: a name held in a variable (`os.environ.get(name)`) is not resolved."""
    reads = []
    for node in ast.walk(ast.parse(source_)):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environment(node.value):
            key = _key(node.slice, constants)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute) and (
                node.func.attr == "get" and _is_environment(node.func.value) or node.func.attr == "getenv"):
            key = _key(node.args[0], constants)
        elif (isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn))
              and _is_environment(node.comparators[0])):
            key = _key(node.left, constants)
        if key:
            reads.append((node.lineno, key))
    return reads


def test_the_notebook_scan_sees_kernel_cells_and_leaves_take_home_programs(tmp_path):
    cells = [{"cell_type": "code", "source": ["%%px\n", "import os\n", "os.environ.get('@A')\n"]},
             {"cell_type": "code", "source": ["%%writefile job.py\n", "import os\n", "os.environ['@B']\n"]},
             {"cell_type": "markdown", "source": ["os.environ['@C']"]}]
    path = tmp_path / "lesson.ipynb"
    path.write_text(json.dumps({"cells": cells}).replace("@", FAKE))
    found = [name for _, name in direct_reads(notebook_python(path), {})]
    assert found == [FAKE + "A"], found


def test_the_read_scan_finds_reads_around_the_table():
    code = ('import os\nX_ENV = "@X"\nos.environ.get("@A")\nenv["@B"]\n"@C" in os.environ\nos.environ.get(X_ENV, "")\n'
            'os.getenv(f"@SLURM_{x}")\nos.environ["@D"] = "1"\nvalue("@E")\n(os.environ if e is None else e).get("@F")\n'
            ).replace("@", FAKE)
    found = [n for _, n in direct_reads(code, {"X_ENV": FAKE + "X"})]
    assert sorted(found) == sorted(FAKE + n for n in ("A", "B", "C", "X", "SLURM_", "F"))


def test_every_read_in_python_goes_through_the_table(capsys):
    constants = _constants()
    around, allowed = {}, {}
    for path in _files():
        if path.suffix != ".py":
            continue
        where = str(path.relative_to(ROOT))
        reads = direct_reads(path.read_text(), constants)
        if reads:
            reason = next((r for prefix, r in NOT_ROUTED.items() if where.startswith(prefix)), None)
            (allowed if reason else around)[where] = reads
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        reads = direct_reads(notebook_python(path), constants)  # the kernel's Python, %%writefile programs left out
        if reads:
            around[str(path.relative_to(ROOT))] = reads
    assert not around, f"COURSE_* read around helpers.settings (use settings.value/text): {around}"
    with capsys.disabled():
        print(f"\nnot routed yet (NOT_ROUTED): {json.dumps({k: len(v) for k, v in sorted(allowed.items())})}")


def test_each_declaration_is_complete_and_its_readers_are_real():
    for setting in SETTINGS.values():
        assert setting.scope in SCOPES and setting.kind and setting.help and setting.readers, setting
        assert "\n" not in setting.help and len(setting.help) <= 120, f"{setting.name}: help is one short line"
        assert bool(setting.check) == bool(setting.bad), f"{setting.name}: a check needs a bad value to try"
        for reader in setting.readers:
            content = (ROOT / reader).read_text()
            family = [setting.name[:i + 1] + "{" for i, c in enumerate(setting.name) if c == "_"]
            named = setting.name in content or any(f in content for f in family) or any(
                constant in content for constant, name in _constants().items() if name == setting.name)
            assert named, f"{setting.name}: {reader} does not read it"


def test_the_table_names_scope_check_and_bad_value():
    """Past the five fields every row has (name, what it takes, default, readers, help), a row names its
    fields: a scope, check or bad value passed by position is refused, so no row can mix them up."""
    row = (FAKE + "X", "a word", "none", ("helpers/settings.py",), "one line")
    assert Setting(*row, scope="hub", check="m:f", bad="?").scope == "hub"
    with pytest.raises(TypeError):
        Setting(*row, "hub", "m:f", "?")


@pytest.mark.parametrize("name", [n for n, s in SETTINGS.items() if s.check])
def test_a_bad_value_is_one_clear_error_naming_the_setting(name, monkeypatch):
    for other in SETTINGS:
        monkeypatch.delenv(other, raising=False)
    setting = SETTINGS[name]
    monkeypatch.setenv(name, setting.bad)
    with pytest.raises(CourseError) as caught:
        checker(setting)()
    message = str(caught.value)
    assert name in message and "\n" not in message, message
    if setting.scope == "class":
        with pytest.raises(CourseError, match=name):
            check_class_value(name, setting.bad)


def test_class_settings_are_the_class_scope_of_the_table():
    assert list(CLASS_SETTINGS) == [n for n, s in SETTINGS.items() if s.scope == "class"]
    assert class_settings({"COURSE_MODE": " Workshop ", "COURSE_HUB_TIME": "1:00:00"}) == {"COURSE_MODE": "workshop"}
    with pytest.raises(CourseError, match="COURSE_HUB_TIME is not a class-wide setting"):
        check_setting("COURSE_HUB_TIME", "1:00:00")


def test_value_text_and_source():
    env = {"COURSE_EPOCHS": " 3 ", "COURSE_MAX_STEPS": "  "}
    assert (value("COURSE_EPOCHS", env), text("COURSE_EPOCHS", env), source("COURSE_EPOCHS", env)) == (
        " 3 ", "3", "environment")
    assert (value("COURSE_MAX_STEPS", env), source("COURSE_MAX_STEPS", env), value("COURSE_MODE", env)) == (
        "  ", "default", None)
    with pytest.raises(KeyError, match=f"{FAKE}NOT_A_SETTING is not declared"):
        value(FAKE + "NOT_A_SETTING", env)


def test_the_guide_is_the_table():
    guide = (ROOT / "docs" / "settings.md").read_text()
    assert guide == markdown(), "docs/settings.md differs: python -m helpers settings --markdown > docs/settings.md"
    assert all(f"| `{name}` |" in guide for name in SETTINGS)


def test_the_settings_command_prints_every_value_and_where_it_came_from():
    env = {name: "" for name in SETTINGS}
    done = run_cli("settings", env={**env, "COURSE_EPOCHS": "3", "COURSE_HUB_TOKEN": "s3cr3t-token"})
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line.split(None, 2)[1:] for line in done.stdout.splitlines()[1:-1] if line.strip()}
    assert set(lines) == set(SETTINGS), set(SETTINGS) ^ set(lines)
    assert lines["COURSE_EPOCHS"] == ["environment", "3"] and lines["COURSE_MODE"][0] == "default"
    assert lines["COURSE_HUB_TOKEN"] == ["environment", "(set, not shown)"] and "s3cr3t" not in done.stdout
    bad = run_cli("settings", env={**env, "COURSE_PORT_RANGE": "1-2", "COURSE_CLASS_LAYOUT": "gpus"})
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "BAD: COURSE_PORT_RANGE='1-2' must lie within" in bad.stdout
    assert "BAD: COURSE_CLASS_LAYOUT='gpus': use node or gpu" in bad.stdout


def test_importing_the_table_imports_no_tensorflow():
    done = run_python("import sys, helpers.settings, helpers.class_settings, helpers.commands.settings_report\n"
                      "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr
