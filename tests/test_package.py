"""The shape of the `deepdive` package, read from its sources (nothing is imported).

Every import of a deepdive module counts, at module level and inside functions alike: an
import deferred into a function still ties the two modules together, and a circle of
deferred imports is a circle that only waits for the wrong call order. Imports under
`if TYPE_CHECKING:` do not count (they never run).

- No import circle, named module by module when there is one.
- Layers: the measurement core imports nothing above it; the models import the core; the
  book's plumbing imports the core and the models; the pages' code (chapters) imports
  those; the release sweeps (releases) may import anything.
- A public API per module: `__all__` lists its public functions and classes, and no module
  imports another's private (underscored) names.
- The core and the plumbing import neither torch nor jax when imported.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "deepdive"
# lowest first: each imports only lower
LAYERS = ("core", "models", "book", "chapters", "releases")
FLAT_LAYERS: dict[str, str] = {}  # every module is in a layer's subpackage
FRAMEWORKS = ("torch", "jax", "jaxlib", "flax", "optax", "transformers", "torch_xla")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SOURCES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
           if "__pycache__" not in p.parts}
TREES = {name: ast.parse(path.read_text(), filename=str(path)) for name, path in SOURCES.items()}


def is_package(name: str) -> bool:
    return SOURCES[name].name == "__init__.py"


def resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package(importer) else base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(name: str, *, module_level_only: bool = False):
    """(imported module, line, at module level, names imported from it) for every import
    in module `name`, skipping `if TYPE_CHECKING:` blocks."""
    found = []

    def visit(node, top: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.Lambda, ast.ClassDef))
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, top, ()) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.append((resolve(name, child), child.lineno, top,
                              tuple(alias.name for alias in child.names)))
            if not (module_level_only and not inner):
                visit(child, inner)

    visit(TREES[name], True)
    return found


def deepdive_edges(name: str) -> dict[str, int]:
    """The deepdive modules `name` imports, each with the first line that does."""
    edges: dict[str, int] = {}
    for target, line, _, names in imports(name):
        candidates = [target] + [f"{target}.{n}" for n in names]
        for candidate in candidates:
            if candidate in SOURCES and candidate != "deepdive" and candidate != name:
                edges.setdefault(candidate, line)
    return edges


GRAPH = {name: deepdive_edges(name) for name in SOURCES}


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Each strongly connected group of more than one module, as one circle through it."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def connect(v):  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [circle_through(sorted(group), graph) for group in groups]


def circle_through(group: list[str], graph) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    return paths[v] + [start]
                if w in members and w not in paths:
                    paths[w] = paths[v] + [w]
                    following.append(w)
        frontier = following
    return group


def describe(circle: list[str], graph=None) -> str:
    graph = GRAPH if graph is None else graph
    steps = [f"{a} (line {graph[a][b]})" for a, b in zip(circle, circle[1:], strict=False)]
    return " -> ".join(steps + [circle[-1]])


def test_the_package_has_no_import_circle():
    found = circles(GRAPH)
    if found:
        pytest.fail("import circles (module, line of its import of the next):\n"
                    + "\n".join(describe(c) for c in found))


def test_the_circle_check_finds_a_circle_and_names_it():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}}
    assert circles(graph) == [["a", "b", "c", "a"]]
    said = describe(["a", "b", "c", "a"], graph).split(" -> ")
    assert said == [f"{m} (line {n})" for m, n in zip("abc", (1, 2, 3), strict=True)] + ["a"]
    assert circles({"a": {"b": 1}, "b": {}}) == []


def layer(name: str) -> str:
    parts = name.split(".")
    if len(parts) >= 3 and parts[1] in LAYERS:
        return parts[1]
    if len(parts) == 2 and parts[1] in LAYERS:  # a layer's own __init__
        return parts[1]
    return FLAT_LAYERS.get(parts[-1], "unplaced")


MODULES = sorted(name for name in SOURCES if name != "deepdive")


def test_every_module_belongs_to_a_layer():
    unplaced = [name for name in MODULES if layer(name) == "unplaced"]
    if unplaced:
        pytest.fail(f"modules in no layer: {unplaced}; put each in a subpackage "
                    f"({', '.join(LAYERS)}), lowest that its imports allow")


@pytest.mark.parametrize("name", MODULES)
def test_a_module_imports_only_its_own_layer_and_lower_ones(name):
    own = LAYERS.index(layer(name)) if layer(name) in LAYERS else len(LAYERS)
    higher = {target: line for target, line in GRAPH[name].items()
              if layer(target) in LAYERS and LAYERS.index(layer(target)) > own}
    if higher:
        pytest.fail(f"{name} ({layer(name)}) imports from a higher layer: "
                    + ", ".join(f"{t} ({layer(t)}, line {line})" for t, line in higher.items()))


def dunder_all(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__"
                                                for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            names.update(top_level_names(ast.Module(body=list(ast.iter_child_nodes(node)),
                                                    type_ignores=[])))
    return names


API_MODULES = [name for name in MODULES if not is_package(name)
               and not name.endswith("__main__")]


@pytest.mark.parametrize("name", API_MODULES)
def test_a_module_names_its_public_api(name):
    tree = TREES[name]
    listed = dunder_all(tree)
    if listed is None:
        pytest.fail(f"{name} has no __all__ naming its public API")
    defined = top_level_names(tree)
    assert sorted(set(listed) - defined) == [], name
    public = {node.name for node in tree.body
              if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
              and not node.name.startswith("_")}
    if public - set(listed):
        pytest.fail(f"{name} defines public functions or classes its __all__ leaves out: "
                    f"{sorted(public - set(listed))}; list them or make them private")


@pytest.mark.parametrize("name", MODULES)
def test_no_module_uses_another_modules_private_names(name):
    tree = TREES[name]
    used = []
    for target, line, _, names in imports(name):
        if target.startswith("deepdive"):
            used += [f"from {target} import {n} (line {line})" for n in names
                     if n.startswith("_") and n != "__version__"]
    aliases = {}  # local name -> deepdive module, for `from deepdive import x` and `import`
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = resolve(name, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in SOURCES:
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in SOURCES and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            used.append(f"{aliases[node.value.id]}.{node.attr} (line {node.lineno})")
    if used:
        pytest.fail(f"{name} uses private names of other modules: {used}")


def framework_imports_at_import(name: str, seen=None) -> set[str]:
    """The frameworks importing module `name` imports, through the deepdive modules it
    imports at module level too."""
    seen = set() if seen is None else seen
    if name in seen:
        return set()
    seen.add(name)
    found = set()
    for target, _, top, names in imports(name, module_level_only=True):
        if not top:
            continue
        root = target.split(".")[0]
        if root in FRAMEWORKS:
            found.add(root)
        for candidate in [target] + [f"{target}.{n}" for n in names]:
            if candidate in SOURCES and candidate not in ("deepdive", name):
                found |= framework_imports_at_import(candidate, seen)
    return found


@pytest.mark.parametrize("name", [n for n in MODULES if layer(n) in ("core", "book")])
def test_the_core_and_the_plumbing_import_no_framework_when_imported(name):
    """What the package's docstring promises: a page or worker pays for a framework only
    when it uses one."""
    imported = sorted(framework_imports_at_import(name))
    if imported:
        pytest.fail(f"importing {name} imports {imported}; import it inside the functions that "
                    "need it")
