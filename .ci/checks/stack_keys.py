"""Every stack key is spelled in one Python file, the typed schema (infra/config.py), and every
`keyname("field")` names a field that is a key.

A file spells a key when one of its string literals (f-string parts included; docstrings and
comments are prose, not spellings) holds the key's name as a word: other code and every message
takes the name from the schema (`GpuNodesConfig.keyname("node_count")`). A key that is an ordinary
lowercase word (`train`, also the name of a pipeline step) counts only in its qualified spelling
`ray-efa-eks:train`; HOMONYMS lists the few other places where the same word names something else.
tests/ and docs are not read: they spell keys on purpose, as a user writes them."""

from __future__ import annotations

import ast
import dataclasses
import re
import sys

from _repo import PACKAGES, REPO, finish

SCHEMA = "infra/config.py"
# (key, file) -> what the word means there
HOMONYMS = {
    ("rayVersion", "infra/manifests.py"): "spec.rayVersion of the RayCluster resource (KubeRay's CRD)",
    ("clusterName", "infra/mock_render.py"): "the clusterName input of aws:eks:NodeGroup (the mock builds its ARN)",
}


def literals(tree: ast.AST) -> list[str]:
    """The string constants of a module, docstrings left out."""
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            docs.add(id(body[0].value))
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def spelling(name: str, project: str) -> re.Pattern[str]:
    word = re.escape(name) if name != name.lower() else re.escape(f"{project}:{name}")
    return re.compile(rf"(?<![\w-]){word}(?!\w)")


def keyname_fields(tree: ast.AST) -> list[tuple[str | None, str, int]]:
    """(class name or None, field, line) of each `X.keyname("field")` call and each call of an alias of one."""
    aliases: dict[str, str | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr == "keyname":
            owner = node.value.value.id if isinstance(node.value.value, ast.Name) else None
            aliases.update({t.id: owner for t in node.targets if isinstance(t, ast.Name)})
    calls = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "keyname":
            calls.append((f.value.id if isinstance(f.value, ast.Name) else None, node.args[0].value, node.lineno))
        elif isinstance(f, ast.Name) and f.id in aliases:
            calls.append((aliases[f.id], node.args[0].value, node.lineno))
    return calls


def problems() -> list[str]:
    sys.path.insert(0, str(REPO))
    from infra import config

    sections = {n: c for n, c in vars(config).items() if dataclasses.is_dataclass(c) and issubclass(c, config.Section)}
    key_fields = {n: {f.name for f in dataclasses.fields(c) if "key" in f.metadata} for n, c in sections.items()}
    any_key_field = set().union(*key_fields.values())
    found: dict[str, set[str]] = {k.name: set() for k in config.KEYS}
    out = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            tree = ast.parse(path.read_text(encoding="utf-8"))
            strings = literals(tree)
            text = "\n".join(strings)
            for k in config.KEYS:
                declared = rel == SCHEMA and k.name in strings  # key("train", ...) itself
                if (declared or spelling(k.name, config.PROJECT).search(text)) and (k.name, rel) not in HOMONYMS:
                    found[k.name].add(rel)
            for owner, name, line in keyname_fields(tree):
                if name not in key_fields.get(owner or "", any_key_field):
                    out.append(f"{rel}:{line}: keyname({name!r}) names no key field of {owner or 'any section'}")
    for name, files in found.items():
        if files != {SCHEMA}:
            others = sorted(files - {SCHEMA})
            out.append(
                f"{name} is spelled in {others or 'no file'}"
                + (f": take it from the schema ({SCHEMA}, Section.keyname)" if others else f", not even in {SCHEMA}")
            )
    return out


if __name__ == "__main__":
    sys.exit(finish("stack keys", problems()))
