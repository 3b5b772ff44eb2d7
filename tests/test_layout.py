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


ENGINE = REPO / "pipelines" / "engine"


def test_the_engine_holds_rooms_and_no_loose_modules():
    """`pipelines/engine/` holds packages by job, each an `__init__` that re-exports its public names (its `__all__`)
    over private `_x.py` modules; a module lying flat beside them is a room nobody drew."""
    loose = sorted(p.name for p in ENGINE.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"loose modules in pipelines/engine: {loose}"
    for room in sorted(p for p in ENGINE.iterdir() if p.is_dir() and p.name != "__pycache__"):
        init = room / "__init__.py"
        assert init.is_file(), f"{room.name}/ has no __init__.py"
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"{room.name}/__init__.py says nothing of what the room is for"
        public = [p.name for p in room.glob("*.py") if not p.name.startswith("_")]
        assert not public, f"{room.name}/ has public modules {public}: a room's modules are private, its __init__ " \
                           "re-exports their names"
        exported = {n for node in tree.body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name) and t.id == "__all__"
                    for n in ast.literal_eval(node.value)}
        imported = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names}
        assert exported and exported <= imported, f"{room.name}/__init__.py: __all__ names what it does not import"


def _named_alike(a: str, b: str) -> bool:
    """Two names a reader takes for one: the same stem (`sweep`, `sweeps`; `judging`, `judges`) or a letter apart."""
    import re

    def stem(name: str) -> str:
        return re.sub(r"(ing|es|s|e)$", "", name)

    if stem(a) == stem(b):
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
    return any(longer[:i] + longer[i + 1:] == shorter or longer[:i] + shorter[i:i + 1] + longer[i + 1:] == shorter
               for i in range(len(longer)))


def test_names_alike_are_found():
    assert _named_alike("sweep", "sweeps") and _named_alike("judging", "judges") and _named_alike("store", "stare")
    assert not _named_alike("records", "reports") and not _named_alike("car", "car_baselines")


def test_no_two_rooms_are_named_alike_nor_like_a_top_level_package():
    """`sweep/` beside `sweeps.py`, `judging` beside `judges/`: names that pull apart what belongs together."""
    rooms = [p.name for p in ENGINE.iterdir() if (p / "__init__.py").is_file()]
    tops = [p.name for p in REPO.iterdir() if (p / "__init__.py").is_file()]
    for i, a in enumerate(rooms):
        for b in rooms[i + 1:] + tops:
            assert not _named_alike(a, b), f"engine room {a!r} is named like {b!r}"


def test_importing_the_engine_imports_neither_ray_nor_mlflow():
    """Ray fixes its node address when it is first imported, and only `cluster.init_ray` puts a local instance on
    loopback: so importing any room of the engine must not import Ray (nor MLflow, which takes seconds)."""
    import subprocess

    rooms = sorted(p.name for p in ENGINE.iterdir() if (p / "__init__.py").is_file())
    probe = ("import sys\n" + "".join(f"import pipelines.engine.{r}\n" for r in rooms) +
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'mlflow'}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO,
                          check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]


def test_the_shipped_systems_use_only_the_public_system_interface():
    # pipelines.contrib holds systems written as a researcher would write theirs: if one of them needs a private
    # name of the engine, the interface is missing something a user's system would miss too
    for name, targets in _graph().items():
        if name.startswith("pipelines.contrib"):
            engine = {t for t in targets if t.startswith("pipelines") and not t.startswith("pipelines.contrib")}
            assert engine <= {"pipelines.engine.systems"}, f"{name} imports {sorted(engine)}"
            inner = {t for t in targets if t.startswith("srag_core")} - SRAG_CORE_PUBLIC
            assert not inner, f"{name} imports {sorted(inner)}"
