"""Makes a distribution installed in one environment importable from another, without copying it.

Usage: python link_distributions.py DIST LINK_DIR   (run with the interpreter of the environment
that has DIST installed)

LINK_DIR receives a symbolic link to every top-level file and folder of DIST and of each
distribution it requires (markers evaluated for this interpreter, extras not followed), their
*.dist-info included, and nothing else. A *.pth file naming LINK_DIR in the other environment's
site-packages puts them after that environment's own packages: a package it has itself still wins.
The package tests use it for PyTorch, whose 5 GB would otherwise be installed a second time.
"""

from __future__ import annotations

import importlib.metadata as metadata
import pathlib
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def closure(name: str) -> list[metadata.Distribution]:
    """DIST and every distribution it requires, transitively, as installed here."""
    seen: dict[str, metadata.Distribution] = {}
    pending = [name]
    while pending:
        key = canonicalize_name(pending.pop())
        if key in seen:
            continue
        try:
            dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            sys.exit(f"link_distributions: {key} is required but not installed in {sys.prefix}")
        seen[key] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return list(seen.values())


def top_level_entries(dist: metadata.Distribution) -> set[pathlib.Path]:
    """The files and folders the distribution installed directly in its site-packages folder (not
    its scripts, which live outside it)."""
    base = pathlib.Path(dist.locate_file(""))
    entries = set()
    for file in dist.files or []:
        parts = pathlib.PurePath(file).parts
        if parts and parts[0] not in ("..", "__pycache__"):
            entries.add(base / parts[0])
    return entries


def main() -> int:
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    dist_name, link_dir = sys.argv[1], pathlib.Path(sys.argv[2])
    link_dir.mkdir(parents=True, exist_ok=True)
    for old in link_dir.iterdir():
        old.unlink()
    for dist in closure(dist_name):
        for entry in top_level_entries(dist):
            link = link_dir / entry.name
            # a namespace folder (nvidia/) is shared by several distributions: linked once
            if entry.exists() and not link.is_symlink():
                link.symlink_to(entry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
