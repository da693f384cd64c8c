"""The package's layering, read from its imports (an AST import graph, function-level imports included).

- No import circle between the package's modules.
- Only the command line and the package's registration import ``cli/``: the UI (``operators/``,
  ``panels/``, ``properties.py``), Blender I/O (``blender_io/``) and the computing packages never do.
- The code below the command line names a setting by its option name (``errors.setting``), never by a
  flag written into a message.
"""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Folders that are not the shipped package.
NOT_SHIPPED = {"tests", "training", "benchmarks", "tools", "docs", "weights", "__pycache__"}
#: Packages and modules that never import ``cli/``.
BELOW_CLI = ("operators", "panels", "blender_io", "pipeline", "readers", "retarget", "model", "properties",
             "errors", "outputs", "device", "deps")


def _modules():
    """Module name (dotted, relative to the package root; ``""`` for the root) -> path."""
    out = {}
    for path in REPO.rglob("*.py"):
        rel = path.relative_to(REPO)
        if rel.parts[0] in NOT_SHIPPED or rel.parts[0].startswith(".") or len(rel.parts) > 1 and any(
                p.startswith(".") for p in rel.parts):
            continue
        if len(rel.parts) == 1 and rel.name in ("devpkg.py",):
            continue
        name = ".".join(rel.with_suffix("").parts)
        if name.endswith("__init__"):
            name = name[: -len("__init__")].rstrip(".")
        out[name] = path
    return out


def _imports(name, path, modules):
    """Modules of the package that module ``name`` imports (relative imports, anywhere in the file)."""
    is_package = path.name == "__init__.py"
    base = name.split(".") if name else []
    if not is_package:
        base = base[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        parts = base[: len(base) - (node.level - 1)] if node.level > 1 else list(base)
        target = ".".join(parts + (node.module.split(".") if node.module else []))
        for alias in node.names:
            sub = (target + "." + alias.name).lstrip(".")
            if sub in modules:
                found.add(sub)
            elif target in modules:
                found.add(target)
    found.discard(name)
    return found


def _graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read():
    graph = _graph()
    assert "cli.bake" in graph and "blender_io.targets" in graph and "pipeline.core" in graph
    assert "pipeline.options" in graph["cli.arguments"]       # (a function-level import counts)
    assert "readers.units" in graph["readers.source_rig"]


def test_no_import_circles():
    assert _cycles(_graph()) == []


def test_the_circle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_nothing_below_the_command_line_imports_it():
    graph = _graph()
    bad = sorted((m, d) for m, deps in graph.items() for d in deps
                 if m.split(".")[0] in BELOW_CLI and (d == "cli" or d.startswith("cli.")))
    assert bad == []


#: A command-line flag inside a string: ``--units``, ``--no-ground``.
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def _message_strings(path):
    """String constants of a file that are not docstrings (what messages are made of)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_messages_below_the_command_line_name_settings_not_flags():
    found = []
    for name, path in _modules().items():
        # (errors.py's flag_word is the command line's wording itself)
        if name.split(".")[0] not in ("readers", "pipeline", "blender_io", "retarget", "model", "outputs"):
            continue
        for line, text in _message_strings(path):
            for flag in _FLAG.findall(text):
                found.append("{}:{}: {}".format(path.relative_to(REPO), line, flag))
    assert found == []
