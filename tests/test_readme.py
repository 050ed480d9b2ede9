"""The commands of README.md and docs/*.md work as written, with tiny models and a tiny release standing in for the
real ones; their links point inside the repository.

Every ``ava ...`` line of the bash blocks is found, the stand-ins below are substituted (``siglip2`` ->
``tiny-siglip2``, the release path -> a tiny parquet release, ``cuda``/``bf16`` -> ``cpu``/``fp32``, the LLM ->
``tiny-random-qwen2``) plus options that only make the run small, and each runs through ``ava``'s main in order. A
block that needs a GPU, a network or a long time says so on the line before it (``<!-- doc-test: gpu -->``,
``network`` or ``long``) and is not run; the options of its commands are still checked. Every ``ava ...`` in
inline code (tables, prose) names a real command and only options it has; every script named exists.
"""

from __future__ import annotations

import functools
import glob
import re
import shlex
from pathlib import Path

import pytest

from ava.cli.main import main
from tests.helpers import heading_anchors, write_release

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = ("gpu", "network", "long")  # <!-- doc-test: KIND --> before a bash block: its commands are not run

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
    ],
}


def bash_blocks(text: str, runnable: bool = True) -> list[str]:
    """The bash blocks of a markdown text; ``runnable``: only those not marked ``<!-- doc-test: gpu|network|long
    -->`` on the line before."""
    blocks = []
    for m in re.finditer(r"(?:<!-- doc-test: (\w+) -->\n)?```bash\n(.*?)```", text, flags=re.S):
        if m.group(1) and m.group(1) not in NOT_RUN:
            raise AssertionError(f"doc-test marker {m.group(1)!r}: use one of {NOT_RUN}")
        if not (runnable and m.group(1)):
            blocks.append(m.group(2))
    return blocks


def readme_commands(text: str, runnable: bool = True) -> list[list[str]]:
    """The ``ava`` command lines of the bash blocks (``&&`` chains split, comments dropped)."""
    commands = []
    for block in bash_blocks(text, runnable):
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
    assert readme_commands(README.read_text(), runnable=False)[0] == ["demo"]  # the quickstart (long: not run here;
    # tests/test_demo.py runs it reduced, and twice)
    commands = readme_commands(README.read_text())
    names = [" ".join(c[:2]) for c in commands]
    for expected in ("data import", "data split", "cache extract", "head train", "report runs/*", "fingerprint"):
        assert any(n.startswith(expected) for n in names), expected


@pytest.mark.slow
def test_readme_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Every runnable ``ava`` command of README.md, then of docs/*.md, in order, in one folder; the drops the README
    quotes as the build's output are the build's output."""
    write_release(tmp_path / "release")
    monkeypatch.chdir(tmp_path)
    printed = []
    for args in [c for doc in DOCS for c in readme_commands(doc.read_text())]:
        args = [STAND_INS.get(a, a).replace("{release}", str(tmp_path / "release")) for a in args]
        if (args[:2] == ["head", "train"] or args[:1] == ["fingerprint"]) and "--ava" not in args:
            args += ["--ava", "counting,orientation"]  # the tiny release's abilities with enough samples
        args = [a if a not in ("ocr",) else "counting" for a in args]  # one OCR row: nothing to train on
        args = [m for a in args for m in (sorted(glob.glob(a)) if "*" in a else [a])]  # the shell's glob
        computes = args[0] in ("head", "fingerprint") or args[:2] == ["cache", "extract"]
        args = _small(args) + ["--threads", "1"] * computes
        with pytest.raises(SystemExit) as exc:
            main(args)
        out = capsys.readouterr()
        printed.append(out.out + out.err)
        # the tiny release holds rows the importer must refuse (listed in import_errors.jsonl): exit code 1
        allowed = (0, 1) if args[:2] == ["data", "import"] else (0,)
        assert exc.value.code in allowed, f"ava {shlex.join(args)} exited {exc.value.code}: {printed[-1][-2000:]}"
    assert (tmp_path / "report" / "report.md").is_file()
    assert len(list((tmp_path / "runs").glob("*/results_test.json"))) >= 2
    docs = " ".join(" ".join(doc.read_text().split()) for doc in DOCS)
    quoted = re.findall(r"`(\w+: [^`]+ \(\d+; e\.g\. [^`)]+\))`", docs)
    assert len(quoted) >= 3, quoted
    said = " ".join(" ".join(printed).split())
    for line in quoted:  # the docs' example drops, as `ava data build` prints them today
        assert line in said, line


# -- every command, option, script and link the docs name exists ---------------------------------------------------
def _inline_commands(text: str) -> list[str]:
    """``ava ...`` in inline code and in every bash block line (runnable or not)."""
    lines = [" ".join(c) for c in ([["ava", *c] for c in readme_commands(text, runnable=False)])]
    return [*re.findall(r"`(ava [^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S)), *lines]


@functools.cache
def _click_command() -> object:
    import typer.main

    from ava.cli.main import app

    return typer.main.get_command(app)


def _command_of(words: list[str]) -> tuple[object, list[str]]:
    command, path = _click_command(), []
    for w in words:
        sub = getattr(command, "commands", {}).get(w)
        if w.startswith("-") or sub is None:
            break
        command, path = sub, [*path, w]
    return command, path


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_ava_command_the_docs_name_exists_with_its_options(doc: Path) -> None:
    wrong = []
    for text in _inline_commands(doc.read_text()):
        words = text.replace("\\|", "|").split()[1:]
        if not words or words[0] in ("COMMAND", "--help", "=", "--version"):  # `ava --help`, a TOML line
            continue
        command, path = _command_of(words)
        options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
        unknown = [o for o in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text) if o not in options]
        if not path or hasattr(command, "commands") and not getattr(command, "invoke_without_command", False):
            wrong.append(f"{text!r}: no such command")
        elif unknown:
            wrong.append(f"{text!r}: `ava {' '.join(path)}` has no option {', '.join(unknown)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_link_and_script_the_docs_name_is_in_the_repository(doc: Path) -> None:
    text = doc.read_text()
    assert "shared/docs" not in text, "users do not have shared/docs: copy what they need into docs/"
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            anchor, path = target[1:], doc
        else:
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve()
            if not path.exists():
                missing.append(f"{target}: no such file")
                continue
        if anchor and path.suffix == ".md" and anchor not in heading_anchors(path.read_text()):
            missing.append(f"{target}: no heading with anchor #{anchor} in {path.name}")
    for script in re.findall(r"(?:python|bash) ((?:docs|examples|benchmarks|\.ci)/[\w./-]+)", text):
        if not (ROOT / script).is_file():
            missing.append(f"{script}: no such script")
    assert not missing, "\n".join(missing)


def slow_tests() -> dict[str, list[str]]:
    """file -> the test functions marked ``slow`` in it (a decorator, or the module's ``pytestmark``), read from the
    source as pytest's marker would select them (parametrized cases count once, by function)."""
    import ast

    def is_slow(node: ast.expr) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr == "slow" for n in ast.walk(node))

    found: dict[str, list[str]] = {}
    for f in sorted(README.parent.glob("tests/test_*.py")):
        tree = ast.parse(f.read_text())
        module_slow = any(
            isinstance(n, ast.Assign)
            and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
            and is_slow(n.value)
            for n in tree.body
        )
        names = [
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef)
            and n.name.startswith("test_")
            and (module_slow or any(is_slow(d) for d in n.decorator_list))
        ]
        if names:
            found[f.name] = sorted(names)
    return found


def readme_slow_list(text: str) -> dict[str, list[str]]:
    """The list under "The slow tier" of tests/README.md: ``- `file`: `test_a`, `test_b` `` lines."""
    section = text.split("## The slow tier", 1)[1].split("\n#", 1)[0]
    listed: dict[str, list[str]] = {}
    for line in section.splitlines():
        if m := re.match(r"- `(test_\w+\.py)`: (.*)", line):
            listed[m.group(1)] = sorted(re.findall(r"`(test_\w+)`", m.group(2)))
    return listed


def test_the_readme_lists_the_slow_tier() -> None:
    assert readme_slow_list((ROOT / "tests" / "README.md").read_text()) == slow_tests()
