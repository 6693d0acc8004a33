"""The package's layout holds: engines imported only to start, attach to or stop engines, no import cycle,
every module with a docstring and a row in the package map (helpers/README.md).

Read from the source (ast), never by importing: a check of who imports what must not depend on what
an import happens to pull in.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.notebooks import notebook_python

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "helpers"

# What a module outside `helpers/engines` may take from it, and why: each name starts, attaches
# to or stops engines (or says where lessons start them). Everything else about Slurm is `helpers.slurm`.
ENGINES_API = {
    "helpers.engines": {"start_engines", "adopt_job", "failure_summary", "Engines", "cluster"},
    "helpers.engines.cluster": {"start_engines", "adopt_job", "stop_all", "stop_by_id", "Engines",
                                "PROFILE"},  # the ipcluster profile a class starts its engines in
    "helpers.engines.on_slurm": {"want_slurm",  # where lessons start their engines (COURSE_ENGINES)
                                 "is_engines_job_name"},  # `class end` stops learners' engines jobs by name
    "helpers.engines.ipcluster_profile": {"write_profile"},  # the profile `ipcluster` starts engines from
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module an `ImportFrom` names (relative imports resolved against `importer`)."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(tree: ast.AST, importer: str, is_package: bool, top_level_only: bool = False):
    """(module, name or None) of every import in `tree`; with `top_level_only`, those run at import time."""
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            module = absolute(node, importer, is_package)
            for alias in node.names:
                yield module, alias.name


def engines_misuse(source: str, importer: str, is_package: bool = False) -> list[str]:
    """Imports of `helpers.engines` in `source` that are not about starting, attaching to or stopping engines."""
    found = []
    for module, name in imports(ast.parse(source), importer, is_package):
        if module == "helpers" and name == "engines":
            found.append("from helpers import engines")
        elif module == "helpers.engines" and name in {"on_slurm", "ownership", "on_engine", "ipcluster_profile"}:
            found.append(f"from {module} import {name}")
        elif module.startswith("helpers.engines") and (name is None and module != "helpers.engines"
                                                       or name is not None and name not in ENGINES_API.get(module, set())):
            found.append(f"from {module} import {name}" if name else f"import {module}")
    return found


def sources_outside_engines():
    for path in sorted(HELPERS.rglob("*.py")):
        if "engines" not in path.relative_to(HELPERS).parts:
            yield str(path.relative_to(ROOT)), path.read_text(), module_name(path), path.name == "__init__.py"
    for path in sorted((ROOT / "slurm").rglob("*.py")):
        yield str(path.relative_to(ROOT)), path.read_text(), "slurm." + path.stem, False
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        yield str(path.relative_to(ROOT)), notebook_python(path), "notebook", False


def test_nothing_outside_the_engines_imports_them_but_to_start_attach_or_stop_engines():
    misuse = {where: found for where, source, name, package in sources_outside_engines()
              if (found := engines_misuse(source, name, package))}
    assert not misuse, f"Slurm knowledge belongs in helpers.slurm, not helpers.engines: {misuse}"


@pytest.mark.parametrize("source, importer", [
    ("from helpers.engines.on_slurm import slurm_reachable\n", "notebook"),
    ("def f():\n    from ..engines.on_slurm import SlurmRequest\n", "helpers.commands.bench"),
    ("from .engines import ownership\n", "helpers.doctor"),
    ("import helpers.engines.kernel_watch\n", "helpers.local_workers"),
])
def test_the_engines_check_catches_a_module_that_reaches_into_them(source, importer):
    assert engines_misuse(source, importer), source


def test_the_engines_check_lets_lessons_start_and_stop_engines():
    assert not engines_misuse("from helpers.engines import start_engines, failure_summary\n"
                              "from helpers.engines import cluster\n", "notebook")


def import_graph() -> dict[str, set[str]]:
    """helpers' modules -> the helpers modules they import when imported (not inside functions)."""
    paths = {module_name(p): p for p in HELPERS.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        edges = set()
        for module, imported in imports(ast.parse(path.read_text()), name, path.name == "__init__.py", True):
            target = f"{module}.{imported}" if f"{module}.{imported}" in paths else module
            if target in paths and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph`, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_package_has_no_import_cycle():
    assert cycle(import_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_every_module_says_what_it_holds_and_is_on_the_map():
    """A first docstring line in every module, and every module named in helpers/README.md."""
    readme = (HELPERS / "README.md").read_text()
    named = set(re.findall(r"`([a-z_][a-z0-9_.]*)`", readme))
    missing_doc, off_map = [], []
    for path in sorted(HELPERS.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if not doc or not doc.splitlines()[0].strip():
            missing_doc.append(str(path.relative_to(ROOT)))
        relative = module_name(path).removeprefix("helpers").lstrip(".")
        if path.name not in ("__init__.py", "__main__.py") and relative not in named \
                and relative.rsplit(".", 1)[-1] not in named:
            off_map.append(relative)
    assert not missing_doc, f"modules without a docstring: {missing_doc}"
    assert not off_map, f"modules helpers/README.md does not place: {off_map}"


def test_slurm_stands_on_its_own():
    """`helpers.slurm` imports nothing of the course but `errors` and `settings` (and itself): the
    engines, the doctor, the workers, the hub's config and the lessons all build on it."""
    graph = {name: set() for name in import_graph()}
    for path in sorted((HELPERS / "slurm").glob("*.py")):
        name = module_name(path)
        for module, _ in imports(ast.parse(path.read_text()), name, path.name == "__init__.py"):
            if module.startswith("helpers") and not module.startswith(("helpers.slurm", "helpers.errors",
                                                                       "helpers.settings")):
                graph[name].add(module)
    assert not {name: found for name, found in graph.items() if found}


def test_the_hub_plugin_stays_out_of_the_learners_import_path():
    """JupyterHub's plugin (`course_hub`) is the hub's: no module of `helpers` imports it, JupyterHub or batchspawner."""
    hub = ("course_hub", "jupyterhub", "batchspawner")
    found = {module_name(path): module for path in sorted(HELPERS.rglob("*.py"))
             for module, _ in imports(ast.parse(path.read_text()), module_name(path), path.name == "__init__.py")
             if module.split(".")[0] in hub}
    assert not found, found


def test_every_test_file_says_what_it_tests():
    """A module docstring in every test file: its name and first line tell a newcomer what it checks."""
    bare = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "tests").rglob("test_*.py"))
            if not ast.get_docstring(ast.parse(path.read_text()))]
    assert not bare, bare


# `from tests.test_x import ...`, `from tests import test_x`, `import test_x`: at a line's start, so that the
# programs a test writes or runs (a string holding an import) count as well
TEST_MODULE_IMPORT = re.compile(r"^[ \t]*(?:from|import)[ \t]+(?:tests\.(?:\w+\.)*)?test_\w+"
                                r"|^[ \t]*from[ \t]+tests(?:\.\w+)*[ \t]+import[ \t]+[^\n]*\btest_\w+", re.M)


def imports_of_test_modules(text: str) -> list[str]:
    """The lines of `text` that import a test module."""
    return [match.group(0).strip() for match in TEST_MODULE_IMPORT.finditer(text)]


def test_no_test_module_imports_another():
    """What tests share lives in tests/support/ (or conftest.py, a fixture): a test module another imports
    is a library a newcomer cannot tell from a test, and its tests' module code runs for the importer too."""
    found = {str(path.relative_to(ROOT)): lines for path in sorted((ROOT / "tests").rglob("*.py"))
             if (lines := imports_of_test_modules(path.read_text()))}
    assert not found, found


def test_the_check_finds_each_way_to_import_a_test_module():
    source = ("from tests.test_browser import ensure_chromium\n    import tests.proofs.test_lesson_01\n"
              "from tests import durations, test_engines\nimport test_hub\nprogram = '''\nfrom tests.test_x import y\n'''\n"
              "from tests.support.browser import ensure_chromium\nfrom tests import durations\n"
              "from tests.conftest import ROOT\n# the tests of test_x\n")
    assert imports_of_test_modules(source) == [
        "from tests.test_browser", "import tests.proofs.test_lesson_01", "from tests import durations, test_engines",
        "import test_hub", "from tests.test_x"]
