"""The API reference is generated from the docstrings (docs/make_api.py, pdoc) and covers every public function;
the example of docs/python-api.md runs as written."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

import ava.api

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "python-api.md"


def _make_api() -> object:
    spec = importlib.util.spec_from_file_location("make_api", ROOT / "docs" / "make_api.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_public_function_has_a_docstring() -> None:
    for name in ava.api.__all__:
        obj = getattr(ava.api, name)
        assert inspect.getdoc(obj), f"ava.api.{name} has no docstring"


def test_api_reference_is_generated_and_covers_every_public_name(tmp_path: Path) -> None:
    pytest.importorskip("pdoc", reason="pdoc comes with the dev extra")
    pages = _make_api().make_api_docs(tmp_path)
    page = tmp_path / "ava" / "api.html"
    assert page in pages
    html = page.read_text()
    for name in ava.api.__all__:
        assert f'id="{name}"' in html, f"ava.api.{name} is missing from the reference"
    # the docstrings are in it, not only the names
    assert "scores[head][ability]" in html and "in-memory VFM" in html


def example_python() -> str:
    section = PAGE.read_text().split("## Example", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Example section has one complete example"
    return blocks[0]


@pytest.mark.slow
def test_python_api_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(example_python(), str(PAGE), "exec"), {"__name__": "__example__"})
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith(("probe-linear", "knn"))]
    assert len(lines) == 2 * 14, out  # both heads, all 14 abilities
    assert "color" in out and "is better" in out
    assert (tmp_path / "ava-runs").is_dir() and len(list((tmp_path / "ava-runs").glob("*/results_test.json"))) == 2
