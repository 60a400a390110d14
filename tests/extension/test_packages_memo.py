"""A plugin registered by hand is recorded with the distribution that installs it
(manager._dist_of_module). The top-level package -> distributions map it reads from
importlib.metadata is remembered while sys.path, the finders, the working directory and
the path entries' modification times stay the same, and not while an entry changed in
the last two seconds (manager._packages_distributions)."""
from __future__ import annotations

import importlib.metadata
import os
import sys

from hidet_framework.extension import manager


def _fake_dist(folder, name: str, top: str) -> None:
    info = folder / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text(f"{top}/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    (folder / top).mkdir()
    (folder / top / "__init__.py").write_text("")


def _settle(folder) -> None:
    """Date the folder back past the two seconds in which the map is not remembered (all
    to the same time: only the path itself then tells two folders apart)."""
    os.utime(folder, (1_600_000_000, 1_600_000_000))


def _two_folders(tmp_path) -> tuple:
    """Folders a (distribution alpha: alpha_pkg) and b (gamma: gamma_pkg), settled."""
    folders = tmp_path / "a", tmp_path / "b"
    for folder, (name, top) in zip(folders, (("alpha", "alpha_pkg"), ("gamma", "gamma_pkg"))):
        folder.mkdir()
        _fake_dist(folder, name, top)
        _settle(folder)
    return folders


def test_the_map_is_importlibs_read_once_and_read_again_when_the_path_changes(tmp_path, monkeypatch):
    a, b = _two_folders(tmp_path)
    monkeypatch.setattr(sys, "path", [str(a)])
    monkeypatch.setattr(manager, "_PACKAGES", [None, None])
    real, calls = importlib.metadata.packages_distributions, []
    monkeypatch.setattr(importlib.metadata, "packages_distributions", lambda: calls.append(1) or real())

    assert manager._packages_distributions() == real() == {"alpha_pkg": ["alpha"]}
    assert manager._packages_distributions() == {"alpha_pkg": ["alpha"]} and len(calls) == 1  # remembered
    assert manager._dist_of_module("alpha_pkg.sub") == ("alpha", "1.0") and len(calls) == 1

    _fake_dist(a, "beta", "beta_pkg")  # installed: a's mtime moves, and is recent
    assert manager._packages_distributions() == {"alpha_pkg": ["alpha"], "beta_pkg": ["beta"]}
    assert len(calls) == 2
    manager._packages_distributions()
    assert len(calls) == 3  # changed in the last two seconds: not remembered
    _settle(a)
    manager._packages_distributions()
    manager._packages_distributions()
    assert len(calls) == 4  # settled: remembered again

    sys.path[:] = [str(b)]  # another path entry, of the same modification time
    assert manager._packages_distributions() == {"gamma_pkg": ["gamma"]} and len(calls) == 5
    sys.path.append(str(a))
    assert manager._packages_distributions()["alpha_pkg"] == ["alpha"] and len(calls) == 6
    assert manager._dist_of_module("gamma_pkg") == ("gamma", "1.0")
    assert manager._dist_of_module("not_installed_anywhere") is None


def test_the_working_directory_counts_for_an_empty_path_entry(tmp_path, monkeypatch):
    a, b = _two_folders(tmp_path)
    monkeypatch.setattr(sys, "path", [""])
    monkeypatch.setattr(manager, "_PACKAGES", [None, None])
    monkeypatch.chdir(a)
    assert manager._packages_distributions() == {"alpha_pkg": ["alpha"]}
    monkeypatch.chdir(b)
    assert manager._packages_distributions() == {"gamma_pkg": ["gamma"]}
