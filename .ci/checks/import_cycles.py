"""No import cycle among the modules of infra/, automation/ and workloads/, counting imports inside
functions; and no first-party import inside a function unless ALLOWED_LOCAL names it with its reason.

An import put inside a function to dodge a cycle is still a cycle (the house style, ../shared/STYLE.md
from the repository root, "One concept, one place"): the graph below has an edge for every `import` and
`from ... import` of a first-party module anywhere in a file, at module level, in a function, or under
`if TYPE_CHECKING:` (annotations name types that must not point back). A function-level import of a
first-party module is allowed only where importing it at module level would cost every caller something
real (torch, pulumi's engine).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from _repo import PACKAGES, REPO, finish

# (importing module, imported module) -> why the import stays inside a function. Keep it short.
ALLOWED_LOCAL = {
    ("automation.steps.preflight", "workloads.data_check"): "data_check imports torch and transformers (about "
    "1.3 s): imported only once the train: block's data is known to be in S3, so a preflight without data pays "
    "nothing (tests/automation/steps/test_preflight_imports.py)",
    ("workloads.train", "workloads.loop"): "loop imports torch, transformers and Ray Train: `--help` and bad input "
    "must stay instant",
    ("workloads.train", "workloads.data_check"): "data_check imports torch and the tokenizer: only with --data",
}


def module_name(path: Path, repo: Path = REPO) -> str:
    parts = list(path.relative_to(repo).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def first_party(name: str, modules: set[str]) -> str | None:
    """The first-party module `name` refers to (a package, a module, or a module's attribute), else None."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imported(node: ast.AST, here: str, is_package: bool) -> list[str]:
    """The dotted names an import statement imports (for `from m import a`, both m and m.a); a string at
    module level that names a module, as a registry for `importlib.import_module` does, imports it too."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
        return [node.value] if node.value.replace(".", "").replace("_", "").isalnum() else []
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = here.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        mod = ".".join([*base, node.module] if node.module else base)
    else:
        mod = node.module or ""
    return [mod, *(f"{mod}.{a.name}" for a in node.names)]


def edges(path: Path, modules: set[str], repo: Path = REPO) -> list[tuple[str, str, int, bool]]:
    """(importer, imported, line, inside a function) for each first-party import in `path`."""
    here = module_name(path, repo)
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            names = imported(child, here, path.name == "__init__.py")
            if isinstance(child, ast.Constant):  # a registry at module level naming exactly a module
                names = [n for n in names if n in modules and not in_function]
            targets = {first_party(n, modules) for n in names}
            for target in sorted(t for t in targets if t and t != here):
                # `from pkg import mod` names both pkg and pkg.mod: the edge is to the most specific one.
                if any(o != target and o and o.startswith(target + ".") for o in targets):
                    continue
                found.append((here, target, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def problems(repo: Path = REPO, packages: tuple[str, ...] = PACKAGES, allowed: dict = ALLOWED_LOCAL) -> list[str]:
    paths = [p for pkg in packages for p in sorted((repo / pkg).rglob("*.py"))]
    modules = {module_name(p, repo) for p in paths}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    out = []
    used = set()
    for path in paths:
        for here, target, line, local in edges(path, modules, repo):
            # Importing a.b.c runs a/__init__ and a/b/__init__ first: edges to them too, but not to the
            # importer's own packages, which are running already.
            for pkg in _packages(target, modules):
                if not here.startswith(pkg + ".") and pkg != here:
                    graph[here].add(pkg)
            if here.startswith(target + "."):
                continue
            graph[here].add(target)
            if local:
                used.add((here, target))
            if local and (here, target) not in allowed:
                out.append(
                    f"{path.relative_to(repo)}:{line}: {here} imports {target} inside a function: import it at "
                    "module level, or add the pair to ALLOWED_LOCAL in .ci/checks/import_cycles.py with the reason"
                )
    for pair in sorted(set(allowed) - used):
        out.append(f"ALLOWED_LOCAL names {pair[0]} -> {pair[1]}, which no longer imports it in a function: remove it")
    for comp in cycles(graph):
        out.append(f"import cycle among {', '.join(comp)}: " + "; ".join(_edges_within(graph, comp)))
    return out


def _packages(module: str, modules: set[str]) -> list[str]:
    """The packages above `module` (a.b for a.b.c, then a) that are first-party."""
    parts = module.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)) if p in modules]


def _edges_within(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    return [f"{a} -> {b}" for a in comp for b in sorted(graph[a]) if b in comp]


if __name__ == "__main__":
    sys.exit(finish("import cycles", problems()))
