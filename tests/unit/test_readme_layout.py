"""README's layout table names every module and folder of the three packages, so a reader finds a
concern by its file name there (modules inside steps/, targets/, commands/ and nccl_check/ are left to
their folder's entry)."""

from __future__ import annotations

import re

from conftest import REPO

PACKAGES = ("infra", "automation", "workloads")


def _layout_section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Layout")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _entries(package: str) -> list[str]:
    """The package's modules (but __init__/__main__) and folders, as README writes them."""
    root = REPO / package
    modules = [p.name for p in root.glob("*.py") if not p.name.startswith("__")]
    folders = [f"{p.name}/" for p in root.iterdir() if p.is_dir() and not p.name.startswith(("__", "."))]
    return sorted(modules + folders)


def test_layout_table_names_every_module_and_folder_of_each_package():
    layout = _layout_section()
    rows = {pkg: "".join(re.findall(rf"^\| `{pkg}/[^|]*\|[^\n]*$", layout, flags=re.M)) for pkg in PACKAGES}
    missing = [
        f"{pkg}/{e}"
        for pkg in PACKAGES
        for e in _entries(pkg)
        if f"`{e}`" not in rows[pkg] and f"`{pkg}/{e}`" not in rows[pkg]
    ]
    assert not missing, f"README's Layout table should name these in their package's row: {missing}"
