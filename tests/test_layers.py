"""The package's layers, read from the source (nothing imported): imports only point down, no module is in an
import circle, and no module takes another module's private name.

The layers, bottom up, in the order a sample travels (README, "Where things live"); a package may import its own
modules and any package below it, never one above. Imports inside functions and under ``TYPE_CHECKING`` count:
a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "ava"

# shared pieces every layer may use: errors, the registry, progress, threads, locks, provenance, the record type ...
BASE = {
    "ava",
    "ava.errors",
    "ava.registry",
    "ava.progress",
    "ava.threads",
    "ava.locking",
    "ava.provenance",
    "ava.validate",
    "ava.torchvision_fix",
    "ava.training_state",
    "ava.sample",
    "ava.home",
    "ava.extras",
    "ava.jsonfile",
    "ava.arguments",
}
LAYERS = [
    "ava.abilities",  # what is measured: abilities, reply parsers, subgroups
    "ava.data",  # samples in: the dataset format, import, split, export
    "ava.vfm",  # frozen models
    "ava.cache",  # features on disk, local or at a URL
    "ava.config",  # typed options of a command, from TOML and the command line
    "ava.metrics",  # metrics and scoring
    "ava.heads",  # what is trained on the features
    "ava.distractors",  # hard-negative option miners
    "ava.vlm",  # whole VLMs answering the questions
    "ava.synth",  # the synthetic suite
    "ava.curate",  # benchmarks curated from a user's own annotations
    "ava.published",  # published results: the paper's Table 5, results folders
    "ava.report",  # tables, ranks, plots, report.html
    "ava.cost",  # what a job costs before it runs: speed table, shapes, calibration
    "ava.sweep",  # grids of runs, local or on SLURM
    "ava.reproduce",  # the paper's protocol end to end, on the sweep's executors
    "ava.callbacks",  # a fingerprint inside a training loop
    "ava.demo",  # the whole pipeline on the synthetic suite
    "ava.api",  # the Python API, one function per command
    "ava.cli",  # the typer layer over it
    "ava.__main__",
]


def _module_name(f: Path) -> str:
    parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(f): f for f in sorted(ROOT.rglob("*.py"))}


def _imports(mod: str, f: Path, known: set[str]) -> list[tuple[int, str, list[str]]]:
    """(line, imported module of the package, names taken from it) for every import in ``f``."""
    pkg = mod if f.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(f.read_text(), str(f))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "ava"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "ava":
                continue
            names = [a.name for a in node.names]
            # `from ava import abilities` imports the module ava.abilities
            subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in known]
            out += [(node.lineno, s, []) for s in subs] or [(node.lineno, base, names)]
    return out


def _layer(mod: str) -> tuple[int, str]:
    if mod in BASE:
        return -1, "base"
    for i, top in enumerate(LAYERS):
        if mod == top or mod.startswith(top + "."):
            return i, top
    raise AssertionError(f"{mod} is in no layer: add its package to LAYERS or BASE in {Path(__file__).name}")


def test_every_module_is_in_a_layer() -> None:
    for mod in _modules():
        _layer(mod)


def test_imports_point_down() -> None:
    mods = _modules()
    up = []
    for mod, f in mods.items():
        rank, top = _layer(mod)
        for line, target, _ in _imports(mod, f, set(mods)):
            t_rank, t_top = _layer(target)
            if t_top != top and t_rank >= rank and not (t_rank == rank == -1):
                up.append(f"{f.relative_to(ROOT.parent)}:{line}: {top} imports {target} ({t_top}, not below it)")
    assert not up, "\n".join(up)


def test_no_import_circles() -> None:
    mods = _modules()
    edges = {m: {t for _, t, _ in _imports(m, f, set(mods)) if t in mods and t != m} for m, f in mods.items()}
    # a package's __init__ imports its own modules and they import names it re-exports from them: not a circle
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in edges.items()}
    circles, done = [], set()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for t in edges[todo.pop()]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return seen

    reached = {m: reach(m) for m in mods}
    for m in mods:
        if m in reached[m] and m not in done:
            circle = sorted(t for t in reached[m] if m in reached[t])
            done.update(circle)
            circles.append(" <-> ".join(circle))
    assert not circles, "\n".join(circles)


def test_no_private_name_crosses_modules() -> None:
    mods = _modules()
    found = []
    for mod, f in mods.items():
        for line, target, names in _imports(mod, f, set(mods)):
            if target != mod and not target.startswith(mod + "."):
                found += [
                    f"{f.relative_to(ROOT.parent)}:{line}: from {target} import {n}"
                    for n in names
                    if n.startswith("_") and not n.startswith("__")
                ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("family", ["openclip", "open_clip", "timm_family", "families", "zoo"])
def test_heads_know_no_vfm_family(family: str) -> None:
    """What a VFM offers reaches the heads through ava.vfm.capabilities, never by asking which family it is."""
    hits = [
        f"{f.relative_to(ROOT.parent)}:{i}"
        for f in (ROOT / "heads").rglob("*.py")
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if f"ava.vfm.{family}" in line or f"is_{family}" in line
    ]
    assert not hits, hits
