"""The README's commands run as written, with tiny models and a tiny release standing in for the real ones.

Every ``ava ...`` line of the README's bash blocks is found, the stand-ins below are substituted (``siglip2`` ->
``tiny-siglip2``, the release path -> a tiny parquet release, ``cuda``/``bf16`` -> ``cpu``/``fp32``, the LLM ->
``tiny-random-qwen2``) plus options that only make the run small, and each runs through ``ava``'s main in order.
"""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest

from ava.cli.main import main
from tests._data_fixtures import write_release

README = Path(__file__).resolve().parent.parent / "README.md"

STAND_INS = {"siglip2": "tiny-siglip2", "/path/to/AVA-Bench": "{release}", "cuda": "cpu", "bf16": "fp32"}
# options added per command only to keep the run seconds long (the README's own options are all kept)
SMALL = {
    ("head", "train", "llm"): [
        "--llm",
        "tiny-random-qwen2",
        "--epochs",
        "1",
        "--max-train",
        "4",
        "--max-eval",
        "2",
        "--lora-r",
        "4",
        "--batch-size",
        "2",
    ],  # fmt: skip
}


def readme_commands(text: str) -> list[list[str]]:
    """The ``ava`` command lines of the README's bash blocks (``&&`` chains split, comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].split(" # ")[0].strip()
            for part in line.split("&&"):
                words = shlex.split(part.strip(), comments=True)
                if words and words[0] == "ava":
                    commands.append(words[1:])
    return commands


def _small(args: list[str]) -> list[str]:
    key = tuple(args[:2]) + ((args[args.index("--head") + 1],) if "--head" in args else ())
    for prefix, extra in SMALL.items():
        if key[: len(prefix)] == prefix:
            return args + extra
    return args


def test_readme_lists_the_quickstart_and_real_model_commands() -> None:
    commands = readme_commands(README.read_text())
    names = [" ".join(c[:2]) for c in commands]
    assert names[0] == "demo"
    for expected in ("data import", "data split", "cache extract", "head train", "report runs/*", "fingerprint"):
        assert any(n.startswith(expected) for n in names), expected


@pytest.mark.slow
def test_readme_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_release(tmp_path / "release")
    monkeypatch.chdir(tmp_path)
    for args in readme_commands(README.read_text()):
        if args[:1] == ["demo"]:  # the quickstart's demo runs reduced in tests/test_demo.py; here: its options parse
            args = args + ["--help"]
        args = [STAND_INS.get(a, a).replace("{release}", str(tmp_path / "release")) for a in args]
        if (args[:2] == ["head", "train"] or args[:1] == ["fingerprint"]) and "--ava" not in args:
            args += ["--ava", "counting,orientation"]  # the tiny release's abilities with enough samples
        args = [a if a not in ("ocr",) else "counting" for a in args]  # one OCR row: nothing to train on
        args = [m for a in args for m in (sorted(glob.glob(a)) if "*" in a else [a])]  # the shell's glob
        computes = args[0] in ("head", "fingerprint") or args[:2] == ["cache", "extract"]
        args = _small(args) + ["--threads", "1"] * computes
        with pytest.raises(SystemExit) as exc:
            main(args)
        # the tiny release holds rows the importer must refuse (listed in import_errors.jsonl): exit code 1
        allowed = (0, 1) if args[:2] == ["data", "import"] else (0,)
        assert exc.value.code in allowed, f"ava {shlex.join(args)} exited {exc.value.code}"
    assert (tmp_path / "report" / "report.md").is_file()
    assert len(list((tmp_path / "runs").glob("*/results_test.json"))) >= 2


def slow_tests() -> dict[str, list[str]]:
    """file -> the test functions marked ``slow`` in it (a decorator, or the module's ``pytestmark``), read from the
    source as pytest's marker would select them (parametrized cases count once, by function)."""
    import ast

    def is_slow(node: ast.expr) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr == "slow" for n in ast.walk(node))

    found: dict[str, list[str]] = {}
    for f in sorted(README.parent.glob("tests/test_*.py")):
        tree = ast.parse(f.read_text())
        module_slow = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                          and is_slow(n.value) for n in tree.body)  # fmt: skip
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
                 and (module_slow or any(is_slow(d) for d in n.decorator_list))]  # fmt: skip
        if names:
            found[f.name] = sorted(names)
    return found


def readme_slow_list(text: str) -> dict[str, list[str]]:
    """The README's list under "The slow tier": ``- `file`: `test_a`, `test_b` `` lines."""
    section = text.split("### The slow tier", 1)[1].split("\n#", 1)[0]
    listed: dict[str, list[str]] = {}
    for line in section.splitlines():
        if m := re.match(r"- `(test_\w+\.py)`: (.*)", line):
            listed[m.group(1)] = sorted(re.findall(r"`(test_\w+)`", m.group(2)))
    return listed


def test_the_readme_lists_the_slow_tier() -> None:
    assert readme_slow_list(README.read_text()) == slow_tests()
