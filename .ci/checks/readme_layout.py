"""The Layout table of docs/architecture.md names every module and folder of the three packages, so a
reader finds a concern by its file name there (modules inside steps/, targets/, commands/ and nccl_check/ are left
to their folder's entry)."""

from __future__ import annotations

import re
import sys

from _repo import PACKAGES, REPO, finish


def layout_section() -> str:
    text = (REPO / "docs" / "architecture.md").read_text()
    start = text.index("## Layout")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def entries(package: str) -> list[str]:
    """The package's modules (but __init__/__main__) and folders, as the Layout table writes them."""
    root = REPO / package
    modules = [p.name for p in root.glob("*.py") if not p.name.startswith("__")]
    folders = [f"{p.name}/" for p in root.iterdir() if p.is_dir() and not p.name.startswith(("__", "."))]
    return sorted(modules + folders)


def missing_entries() -> list[str]:
    layout = layout_section()
    rows = {pkg: "".join(re.findall(rf"^\| `{pkg}/[^|]*\|[^\n]*$", layout, flags=re.M)) for pkg in PACKAGES}
    return [
        f"{pkg}/{e} is not named in its package's row of docs/architecture.md's Layout table"
        for pkg in PACKAGES
        for e in entries(pkg)
        if f"`{e}`" not in rows[pkg] and f"`{pkg}/{e}`" not in rows[pkg]
    ]


if __name__ == "__main__":
    sys.exit(finish("layout table", missing_entries()))
