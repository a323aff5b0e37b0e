"""The floors of the tree, read from every module's imports (``ast``), so the architecture stays visible.

The rule (also in docs/DESIGN.md, "The tree"):

- ground: ``core`` imports no other package of this repository;
- judgement: ``answer`` (the policy, the checks, the answers, the document's models and builder) imports only
  ``core``;
- parts: ``simulator``, ``loadgen``, ``exporter``, ``recommender`` import only ``core``, ``answer`` and
  themselves, never each other;
- top: ``satbench`` imports the parts and the ground; inside it, in ``TOP_ORDER`` (lowest first), a package
  never imports one above it: ``runtimes`` (the launchers and the child processes they run in) imports
  neither ``session`` nor ``tune``, and ``session`` does not import ``tune``;
- ``testkit`` (test support shared by tests and benches) may import the product; the product never
  imports ``testkit`` or ``tests``; ``bench`` imports the product and ``testkit``, never ``tests``.
- one name on install: the ground and the parts are real folders of the one package, ``satbench/core``,
  ``satbench/loadgen`` ... (pyproject.toml packages ``satbench`` only), and every import names them so; no
  link anywhere in the tree, so every module a traceback names is a file with its history.

Imports under ``if TYPE_CHECKING:`` count too: a type-only arrow is still an arrow. Inside one package two
modules must not import each other (directly or through a longer cycle). No module imports another
folder's ``conftest``: test support shared across folders lives in ``testkit``. Each rule is one test that
lists every offender.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUND = {"core"}
JUDGEMENT = {"answer"}
PARTS = {"simulator", "loadgen", "exporter", "recommender"}
TOP = {"satbench"}
PRODUCT = GROUND | JUDGEMENT | PARTS | TOP
OURS = PRODUCT | {"testkit", "tests", "bench"}
INSTALLED = "satbench"  # the one name in site-packages: the ground and the parts are satbench.<folder>
TOP_ORDER = ("runtimes", "session", "tune")  # packages of the top floor, lowest first


def floor(name: str) -> str:
    """The folder (floor) an absolute module name lives in: ``satbench.core.x`` is ``core``."""
    parts = name.split(".")
    if parts[0] == INSTALLED and len(parts) > 1 and parts[1] in GROUND | JUDGEMENT | PARTS:
        return parts[1]
    return parts[0]


def allowed(source: str) -> set[str]:
    """The top-level packages of this repository that modules of package ``source`` may import."""
    if source in GROUND:
        return {source}
    if source in JUDGEMENT:
        return {source} | GROUND
    if source in PARTS:
        return {source} | JUDGEMENT | GROUND
    if source in TOP:
        return PRODUCT
    if source == "testkit":
        return PRODUCT | {"testkit"}
    if source == "bench":
        return PRODUCT | {"testkit", "bench"}
    return OURS


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(path: Path, root: Path = ROOT) -> str:
    """The floor a file lives on: ``satbench/core/x.py`` is ``core``, ``satbench/cli.py`` is ``satbench``."""
    return floor(module_name(path, root))


def imported(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            yield node.lineno, name
            for alias in node.names:  # ``from core import promql`` imports the module core.promql
                yield node.lineno, f"{name}.{alias.name}"


def python_files() -> list[Path]:
    return sorted(p for top in TOP | {"testkit", "tests", "bench"} for p in (ROOT / top).rglob("*.py"))


def test_every_package_is_on_a_floor() -> None:
    tops = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert tops <= OURS, f"a package on no floor: {sorted(tops - OURS)}; add it to the rule"


def crossings(path: Path, root: Path = ROOT) -> list[str]:
    """Every import of ``path`` that leaves the floors its package may import."""
    source = package_of(path, root)
    return [
        f"{path.relative_to(root)}:{line} imports {name}"
        for line, name in imported(path, root)
        if floor(name) in OURS and floor(name) not in allowed(source)
    ]


def bare_imports(path: Path, root: Path = ROOT) -> list[str]:
    """Every import of the ground or a part by its folder's name instead of ``satbench.<folder>``."""
    return [f"{path.relative_to(root)}:{line} imports {name} (say satbench.{name})"
            for line, name in imported(path, root) if name.split(".")[0] in GROUND | JUDGEMENT | PARTS]


def test_the_parts_are_imported_by_their_installed_name() -> None:
    bad = [line for path in python_files() for line in bare_imports(path)]
    assert not bad, "imports that work in a checkout only:\n" + "\n".join(bad)


def test_satbench_is_the_one_name_on_install() -> None:
    """The ground and each part are real folders of satbench/, no link is left in the tree, and only satbench
    is packaged."""
    for part in sorted(GROUND | JUDGEMENT | PARTS):
        folder = ROOT / INSTALLED / part
        assert folder.is_dir() and not folder.is_symlink() and (folder / "__init__.py").is_file(), folder
        assert not (ROOT / part).exists(), f"{part}/ at the top beside satbench/{part}/"
    links = [p.relative_to(ROOT).as_posix() for top in OURS | {"docs", "prometheus", "grafana", "deploy"}
             if (ROOT / top).exists() for p in (ROOT / top).rglob("*") if p.is_symlink()]
    assert not links, f"links in the tree: {links}"
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == [INSTALLED, f"{INSTALLED}.*"]


def test_imports_keep_to_the_floors() -> None:
    """Every module of every floor, in one test that names every offender at once."""
    files = python_files()
    assert len(files) > 100, "the tree was not found"
    bad = [line for path in files for line in crossings(path)]
    assert not bad, "imports across the floors:\n" + "\n".join(bad)


def top_package(name: str) -> str | None:
    """The package of ``TOP_ORDER`` a module name lies in: ``satbench.session.run`` is ``session``."""
    parts = name.split(".")
    return parts[1] if parts[0] == INSTALLED and len(parts) > 1 and parts[1] in TOP_ORDER else None


def arrows_up_the_top(path: Path, root: Path = ROOT) -> list[str]:
    """Every import of ``path`` that names a package above its own in ``TOP_ORDER``."""
    source = top_package(module_name(path, root))
    if source is None:
        return []
    above = TOP_ORDER[TOP_ORDER.index(source) + 1:]
    return [f"{path.relative_to(root)}:{line} imports {name}" for line, name in imported(path, root)
            if top_package(name) in above]


def test_the_top_floor_keeps_its_order() -> None:
    bad = [line for path in python_files() for line in arrows_up_the_top(path)]
    assert not bad, "imports up the top floor's order " + " < ".join(TOP_ORDER) + ":\n" + "\n".join(bad)


def test_the_order_check_catches_a_runtime_importing_the_session(tmp_path: Path) -> None:
    planted = {
        "satbench/runtimes/router.py": "from satbench.session.processes import StartError\n",  # up
        "satbench/runtimes/simulator.py": "if True:\n    from satbench.tune import walk\n",  # up two
        "satbench/session/parts.py": "from satbench.runtimes.processes import ProcessSet\n",  # down
        "satbench/tune/walk.py": "from satbench.session.parts import LAUNCHERS\n",  # down
        "satbench/report/render.py": "from satbench.session import run\n",  # outside the order
    }
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert {name: arrows_up_the_top(tmp_path / name, tmp_path) for name in planted} == {
        "satbench/runtimes/router.py": ["satbench/runtimes/router.py:1 imports satbench.session.processes",
                                        "satbench/runtimes/router.py:1 imports satbench.session.processes.StartError"],
        "satbench/runtimes/simulator.py": ["satbench/runtimes/simulator.py:2 imports satbench.tune",
                                           "satbench/runtimes/simulator.py:2 imports satbench.tune.walk"],
        "satbench/session/parts.py": [],
        "satbench/tune/walk.py": [],
        "satbench/report/render.py": [],
    }


def conftest_imports(path: Path, root: Path = ROOT) -> list[str]:
    """Every import of another folder's ``conftest``: what tests of several folders share is a module of
    ``testkit`` (fixtures reach tests by pytest's own lookup), never a conftest imported as a library."""
    here = ".".join(path.relative_to(root).parent.parts)
    return [f"{path.relative_to(root)}:{line} imports {name}" for line, name in imported(path, root)
            if "conftest" in name.split(".") and name.split(".conftest")[0] != here]


def test_no_conftest_is_imported_from_another_folder() -> None:
    bad = [line for path in python_files() for line in conftest_imports(path)]
    assert not bad, "conftest modules imported by another folder:\n" + "\n".join(bad)


def _module_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in python_files() if package_of(p) in PRODUCT | {"testkit"}}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for _, target in imported(path):
            is_package = target in modules and modules[target].name == "__init__.py"
            if target in modules and target != name and not is_package:
                targets.add(target)
        graph[name] = targets
    return graph


def test_no_import_cycles_between_modules() -> None:
    graph = _module_graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checks_catch_an_arrow_up_a_sideways_one_a_test_import_and_a_conftest_import(tmp_path: Path) -> None:
    planted = {
        "satbench/loadgen/ladder.py": "import satbench.cli\n",  # up
        "satbench/exporter/relay.py": "from satbench.loadgen import config\n",  # sideways
        "satbench/recommender/app.py": "if True:\n    from testkit.net import free_port\n",  # product -> test support
        "bench/x.py": "from tests.support import prom\n",  # bench -> tests
        "tests/grafana/test_x.py": "from tests.session.conftest import SHORT\nfrom tests.grafana.conftest import y\n",
        "satbench/core/records.py": "from . import api\nfrom satbench.core import figures\n",  # inside the ground: fine
        "satbench/cli.py": "from satbench.loadgen import runner\nfrom satbench.core import promql\n",  # down
        "satbench/answer/verdicts.py": "from satbench.recommender.store import RunStore\n",  # judgement -> part: up
        "satbench/loadgen/plateau.py": "from satbench.answer.policy import Policy\n",  # part -> judgement: down
    }
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = {name: crossings(tmp_path / name, tmp_path) for name in planted}
    assert found == {
        "satbench/loadgen/ladder.py": ["satbench/loadgen/ladder.py:1 imports satbench.cli"],
        "satbench/exporter/relay.py": ["satbench/exporter/relay.py:1 imports satbench.loadgen",
                                       "satbench/exporter/relay.py:1 imports satbench.loadgen.config"],
        "satbench/recommender/app.py": ["satbench/recommender/app.py:2 imports testkit.net",
                                        "satbench/recommender/app.py:2 imports testkit.net.free_port"],
        "bench/x.py": ["bench/x.py:1 imports tests.support", "bench/x.py:1 imports tests.support.prom"],
        "tests/grafana/test_x.py": [],  # tests may import tests (the floors), but see conftest_imports
        "satbench/core/records.py": [],
        "satbench/cli.py": [],
        "satbench/answer/verdicts.py": ["satbench/answer/verdicts.py:1 imports satbench.recommender.store",
                                        "satbench/answer/verdicts.py:1 imports satbench.recommender.store.RunStore"],
        "satbench/loadgen/plateau.py": [],
    }
    (tmp_path / "satbench/old.py").write_text("from core.records import Record\nimport satbench.core.api\n")
    assert bare_imports(tmp_path / "satbench/old.py", tmp_path) == [
        "satbench/old.py:1 imports core.records (say satbench.core.records)",
        "satbench/old.py:1 imports core.records.Record (say satbench.core.records.Record)"]
    assert conftest_imports(tmp_path / "tests/grafana/test_x.py", tmp_path) == [
        "tests/grafana/test_x.py:1 imports tests.session.conftest",
        "tests/grafana/test_x.py:1 imports tests.session.conftest.SHORT"]
