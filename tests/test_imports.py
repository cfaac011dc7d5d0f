"""No import circles in generator/: the modules form layers (the compiler's stages read -> resolve -> engines ->
check -> plan -> render -> write; docker -> backends -> actions -> cli). Every import counts, at the top of a
module or inside a function: a circle through a lazy import is still two modules that each need the other. So do
the imports by name: cli/group.py loads each command's module through importlib, from the table in
cli/commands.py, and the graph holds those edges too. The compiler's stages import only down the flow, and the
top of generator/ holds only the entry points."""

from __future__ import annotations

import ast
from pathlib import Path

from generator.cli.commands import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "generator"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from .x import y
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # `from pkg import mod` imports the submodule; `from mod import name` the module itself
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    graph["generator.cli.group"] |= {entry.module for entry in COMMANDS.values()}  # importlib, by name
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_generator_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_check_sees_a_cycle():
    # The check itself must be able to fail: a made-up graph with a circle through three modules.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_lazy_and_from_imports():
    graph = import_graph()
    assert "generator.cli.compile" in graph["generator.cli.deploy"]  # top-level `from generator.cli.compile import`
    assert "generator.deploy.targets" in graph["generator.cli.deploy"]  # imported inside a command's body
    assert "generator.deploy.findings" in graph["generator.deploy.requirements"]  # `from pkg import mod`: the module
    assert "generator.cli.bench" in graph["generator.cli.group"]  # by name, from the command table


# The compiler's stages in flow order: a module of one imports only from its own or an earlier stage, and
# generator.diagnostics (shared by every stage and the deployer). The entry points (build, validate, explain) and
# cli/, deploy/, cluster/, transfer/, importers/, bench/ may import any stage.
STAGES = ("read", "resolve", "engines", "check", "plan", "render", "write")
SHARED = {"generator.diagnostics"}
ENTRY_POINTS = {"__init__", "__main__", "build", "validate", "explain", "diagnostics"}
MAX_LINES = 350


def stage_of(module: str) -> int | None:
    parts = module.split(".")
    return STAGES.index(parts[1]) if len(parts) > 2 and parts[0] == "generator" and parts[1] in STAGES else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a stage's module that is not from its own or an earlier stage (nor a shared module)."""
    found = []
    for name in sorted(graph):
        mine = stage_of(name)
        if mine is None:
            continue
        for target in sorted(graph[name] - SHARED):
            theirs = stage_of(target)
            if theirs is None or theirs > mine:
                found.append(f"{name} -> {target}")
    return found


def test_stages_import_only_down_the_flow():
    assert upward_imports(import_graph()) == []


def test_the_stage_check_sees_an_upward_import():
    graph = {"generator.check.launch": {"generator.render.templates", "generator.diagnostics"},
             "generator.render.templates": {"generator.plan.nodes", "generator.render.versions"},
             "generator.plan.nodes": {"generator.deploy.names"},  # a stage leaning on the deployer
             "generator.read.tomldoc": {"generator.build"},  # or on an entry point
             "generator.build": {"generator.write.output"}}  # entry points may import any stage
    assert upward_imports(graph) == ["generator.check.launch -> generator.render.templates",
                                     "generator.plan.nodes -> generator.deploy.names",
                                     "generator.read.tomldoc -> generator.build"]


def test_every_stage_is_a_package_saying_its_part_of_the_flow():
    for stage in STAGES:
        init = PACKAGE / stage / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text("utf-8")))
        assert doc and "\n" not in doc and doc.lower().startswith(stage), f"{init}: {doc!r}"


def test_the_top_of_generator_holds_only_the_entry_points():
    assert {p.stem for p in PACKAGE.glob("*.py")} == ENTRY_POINTS



def test_no_compiler_module_is_over_the_limit():
    compiler = [p for stage in STAGES for p in (PACKAGE / stage).glob("*.py")] + list(PACKAGE.glob("*.py"))
    long = {str(p.relative_to(ROOT)): n for p in compiler if (n := len(p.read_text("utf-8").splitlines())) > MAX_LINES}
    assert long == {}
