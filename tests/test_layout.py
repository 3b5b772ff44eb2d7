"""The package layout's rules, read from the source: no import circles, and dependencies that point one way
(`pipelines` -> `srag_core`, `judges`, `car_baselines`; the engine never imports the command line; `srag_core` never
imports Ray or MLflow; `evalstats` imports nothing of the project and nothing but NumPy, SciPy and the standard
library; other packages use only the public surface of `srag_core`; no module imports another package's private `_x`
module or name)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("srag_core", "judges", "car_baselines", "pipelines", "evalstats")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every project module `name` imports, at module level or inside a function (a lazy import still ties the two
    modules together). `from pkg import x` names the module pkg.x when there is one, else pkg itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    assert _cycles(_graph()) == []


def _external_imports(pkg: str) -> set[tuple[str, str]]:
    out = set()
    for path in (REPO / pkg).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out.update((str(path.relative_to(REPO)), a.name.split(".")[0]) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add((str(path.relative_to(REPO)), node.module.split(".")[0]))
    return out


def test_dependencies_point_one_way():
    graph = _graph()
    for name, targets in graph.items():
        top = name.split(".")[0]
        for t in targets:
            if top != "pipelines":
                assert not t.startswith("pipelines"), f"{name} imports {t}: only pipelines may use pipelines"
            if name.startswith("pipelines.engine") or not name.startswith("pipelines.cli"):
                assert not t.startswith("pipelines.cli"), f"{name} imports the command line ({t})"
    for path, top in _external_imports("srag_core"):
        assert top not in ("ray", "mlflow"), f"{path} imports {top}: srag_core stays free of Ray and MLflow"
    # first_json_object (srag_core.llm._jsontext) is the one helper srag_core and judges share: it imports nothing of
    # ours, and it is all of srag_core that judges uses (judges/README.md).
    assert not graph["srag_core.llm._jsontext"]
    for name, targets in graph.items():
        if name.startswith("judges"):
            assert {t for t in targets if t.startswith("srag_core")} <= {"srag_core.llm"}, (name, targets)
    for file in (REPO / "judges").rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("srag_core"):
                assert [a.name for a in node.names] == ["first_json_object"], (file.name, node.module)


def test_evalstats_stands_alone():
    # every package may use evalstats, so it uses none of them: numpy, scipy and the standard library only
    for name, targets in _graph().items():
        if name.startswith("evalstats"):
            assert all(t.startswith("evalstats") for t in targets), (name, targets)
    outside = {top for _, top in _external_imports("evalstats")} - set(sys.stdlib_module_names)
    assert outside <= {"numpy", "scipy", "evalstats"}, outside


# What srag_core's docstring calls public: the package's own names (`__all__`) and these modules.
SRAG_CORE_PUBLIC = {"srag_core", "srag_core.agent", "srag_core.corpus", "srag_core.llm", "srag_core.workspace",
                    "srag_core.workspace.diagnostics", "srag_core.workspace.context", "srag_core.tools",
                    "srag_core.tools.patterns", "srag_core.tools.embedding_tools", "srag_core.discovery",
                    "srag_core.discovery.sandbox", "srag_core.embeddings", "srag_core.vanilla"}


def test_other_packages_use_only_the_public_surface_of_srag_core():
    import srag_core

    for name, targets in _graph().items():
        if not name.startswith("srag_core"):
            inner = {t for t in targets if t.startswith("srag_core")} - SRAG_CORE_PUBLIC
            assert not inner, f"{name} imports {sorted(inner)}: use what srag_core/__init__.py calls public"
    for pkg in PACKAGES[1:]:
        for file in (REPO / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module == "srag_core":
                    for alias in node.names:
                        public = alias.name in srag_core.__all__ or f"srag_core.{alias.name}" in SRAG_CORE_PUBLIC
                        assert public, f"{file.relative_to(REPO)} imports srag_core.{alias.name}: not in __all__"


def test_the_command_line_leaves_ray_and_mlflow_to_the_engine():
    for path, top in _external_imports("pipelines/cli"):
        assert top != "mlflow", f"{path} imports mlflow: tracking belongs in pipelines.engine"
        # submit only talks to a cluster's Jobs API; starting Ray and running tasks is the engine's
        assert top != "ray" or path == "pipelines/cli/submit.py", f"{path} imports ray: Ray work belongs in the engine"


def _private_imports(known: dict[str, Path], roots: tuple[str, ...] = PACKAGES) -> list[str]:
    """Imports of a private module (`pkg._x`) or a private name (`from pkg import _x`) from outside the package that
    owns it: a room's `_x` modules and names are its own, other rooms use what its `__init__` re-exports."""
    found = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] not in roots:
                    continue
                parts = target.split(".")
                private = next((i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None)
                if private is None:
                    continue
                owner = ".".join(parts[:private])
                if package != owner and not package.startswith(owner + "."):
                    found.append(f"{name} imports {target}")
    return found


def test_private_import_finder_finds_a_reach_into_another_room(tmp_path):
    files = {"p.a.__init__": "from p.a._x import f\n", "p.a._x": "def f(): pass\n",
             "p.a._y": "from p.a._x import f\n", "p.b.z": "from p.a._x import f\nfrom p.a import _x\nimport p.a._x\n",
             "p.b.ok": "from p.a import f\n", "p.a.sub.w": "from p.a._x import f\n"}
    known = {}
    for name, text in files.items():
        path = tmp_path / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        known[name.removesuffix(".__init__")] = path
    assert _private_imports(known, ("p",)) == ["p.b.z imports p.a._x.f"] + ["p.b.z imports p.a._x"] * 2


def test_no_module_reaches_into_another_packages_private_module():
    assert _private_imports(_modules()) == []
