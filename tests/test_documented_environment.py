"""Every ``HIDET_FRAMEWORK_*`` environment variable the code reads is named in the
README (its table, or the list of A/B switches there as ``_SUFFIX``): a setting a user
cannot find is a setting they cannot use or turn off."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = ["hidet_framework", "plugins/*/src", "hidet_plugin_*/src"]
PREFIX = "HIDET_FRAMEWORK_"
NAME = re.compile(PREFIX + r"[A-Z0-9_]*[A-Z0-9]")


def variables_read() -> dict[str, str]:
    """Variable name -> the first source file naming it."""
    found: dict[str, str] = {}
    for pattern in SOURCES:
        for folder in sorted(ROOT.glob(pattern)):
            for path in sorted(folder.rglob("*.py")):
                for name in NAME.findall(path.read_text()):
                    found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def undocumented(readme: str, names: dict[str, str]) -> dict[str, str]:
    # `NAME` or `NAME=value` in the table; a name that only prefixes another does not count
    return {name: where for name, where in names.items()
            if not re.search(f"`{name}[`=]", readme) and f"`_{name[len(PREFIX):]}`" not in readme}


def test_every_environment_variable_is_in_the_readme():
    names = variables_read()
    assert len(names) > 15, "the source folders were not found"
    missing = undocumented((ROOT / "README.md").read_text(), names)
    assert not missing, f"read by the code, not named in README.md: {missing}"


def test_the_check_sees_a_missing_variable():
    readme = "| `HIDET_FRAMEWORK_CACHE` | ... |\n| `HIDET_FRAMEWORK_CC_TIMEOUT` |\nswitches: `_HCONV`, `_INPLACE=1`."
    names = {"HIDET_FRAMEWORK_CACHE": "a.py", "HIDET_FRAMEWORK_HCONV": "b.py", "HIDET_FRAMEWORK_INPLACE": "c.py",
             "HIDET_FRAMEWORK_CPU_ISA": "d.py", "HIDET_FRAMEWORK_CACHE_DIR": "e.py", "HIDET_FRAMEWORK_CC": "f.py"}
    assert undocumented(readme, names) == {"HIDET_FRAMEWORK_CPU_ISA": "d.py", "HIDET_FRAMEWORK_CACHE_DIR": "e.py",
                                           "HIDET_FRAMEWORK_CC": "f.py", "HIDET_FRAMEWORK_INPLACE": "c.py"}
