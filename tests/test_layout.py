"""The test suite's own layout: shared code lives in ``tests/helpers.py`` (plain helpers) and ``tests/conftest.py``
(fixtures), imported one way; no test module imports another, so each test file can be read, run and moved alone."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, at any depth (imports inside functions count too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def test_no_test_module_imports_another_and_helpers_are_imported_one_way() -> None:
    local = {p.stem for p in TESTS.glob("*.py")}  # importable by its bare name only where tests/ is on sys.path
    bad = []
    for path in sorted(TESTS.glob("*.py")):
        for line, module in imported_modules(path):
            top, _, rest = module.partition(".")
            name = rest.split(".")[0] if top == "tests" else top
            if name.startswith("test_") and (top == "tests" or name in local):
                bad.append(f"{path.name}:{line}: imports the test module {module}")
            elif (top == "tests" and name != "helpers") or (top != "tests" and name in local):
                bad.append(f"{path.name}:{line}: imports {module}; shared code is imported as tests.helpers")
    assert not bad, "\n".join(bad)


def test_shared_code_is_in_helpers_and_conftest_only() -> None:
    """No other module beside the tests: a helper module of its own would be a second place to look."""
    others = sorted(p.name for p in TESTS.glob("*.py") if not p.name.startswith("test_"))
    assert others == ["conftest.py", "helpers.py"]
