"""The paper's Table 5 as shipped: every value and printed rank equal to the paper's, units, provenance, and the
flags on exactly the cells the table contradicts itself on."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import pytest

from ava.published import paper_table
from ava.published.paper import contradictions, mean_printed_rank

# Table 5 of the paper (supplementary C.1), typed again from the paper, row by row: `value (printed rank)` per ability
# in the paper's column order, then the printed average rank. The shipped data file must hold exactly these.
COLUMNS = "abs_depth rel_depth ocr counting localization recognition fine_grained scene action spatial emotion orientation texture color"  # noqa: E501
TABLE = """
siglip2   0.0843 (3)  97.38 (2) 81.18 (1) 0.225 (1) 0.6738 (1) 88.19 (1) 90.17 (3) 72.6 (3)  45.33 (2) 99.5 (2)  58.39 (5) 79.2 (4)  94.08 (2) 72.25 (2) 2.4
aimv2     0.1008 (9)  95.71 (8) 62.44 (3) 0.254 (3) 0.5896 (5) 85.04 (4) 91.78 (1) 72.86 (2) 43.61 (3) 99.13 (6) 60.68 (1) 79.71 (3) 94.11 (1) 19.61 (6) 3.9
siglip    0.0953 (6)  96.58 (7) 80.3 (2)  0.229 (2) 0.6103 (4) 87.84 (2) 90.94 (2) 73.4 (1)  45.76 (1) 99.07 (7) 59.6 (4)  78.91 (5) 93.66 (3) 12.64 (3) 3.6
clip      0.08461 (4) 97.04 (4) 60.44 (6) 0.29 (7)  0.5787 (7) 85.02 (5) 86.83 (4) 72.32 (5) 41.59 (4) 99.25 (5) 60.42 (2) 77.77 (6) 93.25 (5) 19.85 (7) 4.9
internvit 0.08212 (2) 97 (5)    60.88 (5) 0.269 (5) 0.585 (6)  83.19 (7) 72.83 (7) 71.63 (6) 36.13 (7) 99.5 (4)  59.99 (3) 75.71 (7) 91.21 (7) 20.09 (8) 5.4
radio     0.07645 (1) 97.92 (1) 62.44 (4) 0.257 (4) 0.6617 (2) 84.9 (6)  85.44 (6) 72.5 (4)  38.77 (5) 99.69 (1) 56.59 (6) 83.71 (2) 93.32 (4) 17.16 (5) 3.6
dinov2    0.08469 (5) 97.25 (3) 9.97 (7)  0.272 (6) 0.6598 (3) 86.31 (3) 85.5 (5)  70.99 (7) 37.45 (6) 99.5 (3)  54.44 (7) 85.54 (1) 93.06 (6) 21.54 (9) 5.3
sam       0.09792 (8) 94.13 (9) 9.79 (8)  0.313 (8) 0.5216 (8) 76.68 (8) 40.06 (8) 58.28 (9) 17.25 (9) 90.22 (8) 36.88 (9) 69.37 (8) 81.02 (9) 9.87 (1)  7.8
midas     0.09563 (7) 96.63 (6) 7.72 (9)  0.336 (9) 0.449 (9)  75.05 (9) 32.83 (9) 60.19 (8) 18.25 (8) 53.58 (9) 40.4 (8)  67.37 (9) 86.38 (8) 13.28 (4) 8
"""  # noqa: E501


def _typed() -> dict[str, tuple[list[tuple[float, int]], float]]:
    out = {}
    for line in TABLE.strip().splitlines():
        words = line.replace("(", " ").replace(")", " ").split()
        key, nums, avg = words[0], words[1:-1], float(words[-1])
        out[key] = ([(float(nums[i]), int(nums[i + 1])) for i in range(0, len(nums), 2)], avg)
    return out


def test_every_published_value_and_rank_is_the_papers():
    source = paper_table()
    typed = _typed()
    assert list(source.columns) == COLUMNS.split()
    assert [e.vfm for e in source.entries] == list(typed)
    n = 0
    for e in source.entries:
        cells, avg = typed[e.vfm]
        assert [(float(c.printed), c.rank) for c in e.cells.values()] == cells, e.vfm
        assert e.average_rank == avg
        n += len(cells)
    assert n == 126


def test_every_vfm_is_a_registry_key_and_the_head_is_the_papers():
    from ava.vfm import VFMS

    source = paper_table()
    assert {e.vfm for e in source.entries} == {
        "siglip2",
        "aimv2",
        "siglip",
        "clip",
        "internvit",
        "radio",
        "dinov2",
        "sam",
        "midas",
    }
    for e in source.entries:
        assert VFMS.canonical(e.vfm) == e.vfm
        assert e.head == "llm" and e.head_id == "llm:qwen2-0.5b:generate"
        assert e.details["checkpoint"]
    p = source.provenance
    assert p["arxiv"] == "2506.09082" and p["table"] == "Table 5 (supplementary C.1)"
    assert "Qwen2-0.5B + LoRA" in p["head"] and "mlp2x_gelu" in p["head"]
    assert source.split_text == "the paper's official test split (not public)" and not source.split_public


def test_units_are_converted_exactly_to_avas():
    source = paper_table()
    cols = source.columns
    assert {ab: c.scale for ab, c in cols.items() if c.scale != 1} == {
        ab: 100
        for ab in (
            "rel_depth",
            "ocr",
            "recognition",
            "fine_grained",
            "scene",
            "action",
            "spatial",
            "emotion",
            "orientation",
            "texture",
        )
    }
    assert (cols["color"].metric, cols["color"].higher_is_better) == ("ciede2000", False)
    assert (cols["localization"].metric, cols["ocr"].metric) == ("giou", "anls")
    siglip2 = source.entries[0].cells
    assert siglip2["rel_depth"].value == 0.9738  # exactly, not 0.9738000000000001
    assert (
        siglip2["ocr"].value == 0.8118 and siglip2["localization"].value == 0.6738 and siglip2["color"].value == 72.25
    )
    for e in source.entries:
        for ab, c in e.cells.items():
            assert c.value == pytest.approx(c.printed / cols[ab].scale, abs=1e-15)


def test_the_flags_are_exactly_the_tables_own_contradictions():
    source = paper_table()
    flags = {f.id: (f.kind, f.excludes, set(f.cells)) for f in source.flags}
    assert flags["color-siglip2"] == ("value_contradicts_rank", "value", {("siglip2", "color")})
    assert flags["spatial-tie"] == (
        "tie_ranked_apart",
        "printed_rank",
        {("siglip2", "spatial"), ("internvit", "spatial"), ("dinov2", "spatial")},
    )
    assert flags["ocr-tie"] == ("tie_ranked_apart", "printed_rank", {("aimv2", "ocr"), ("radio", "ocr")})
    averages = {c[0] for f in source.flags if f.kind == "average_rank_not_mean" for c in f.cells}
    assert averages == {"siglip2", "siglip", "clip", "internvit", "dinov2"}
    assert all(f.reason and "\n" not in f.reason for f in source.flags)
    means = {e.vfm: round(float(mean_printed_rank(e)), 2) for e in source.entries}
    assert (means["siglip2"], means["clip"], means["internvit"], means["dinov2"], means["siglip"]) == (
        2.29,
        5.07,
        5.64,
        5.07,
        3.5,
    )
    assert {(k, frozenset(c)) for k, c in contradictions(source)} == {
        (f.kind, frozenset(f.cells)) for f in source.flags
    }
    assert source.excluded("siglip2", "color") and not source.excluded("siglip2", "spatial")


def test_the_contradiction_finder_sees_a_fixed_table_as_sound():
    """The checks can fail: with the colour typo fixed, the tie broken and the averages recomputed, nothing is left."""
    source = paper_table()
    for e in source.entries:
        if e.vfm == "siglip2":
            e.cells["color"] = dataclasses.replace(e.cells["color"], printed=11.0)
            e.cells["spatial"] = dataclasses.replace(e.cells["spatial"], printed=99.55)
        if e.vfm == "dinov2":
            e.cells["spatial"] = dataclasses.replace(e.cells["spatial"], printed=99.52)
        if e.vfm == "aimv2":
            e.cells["ocr"] = dataclasses.replace(e.cells["ocr"], printed=62.45)
        mean = mean_printed_rank(e)
        e.average_rank = float(round(mean * 10) / 10) if mean is not None else None
    assert contradictions(source) == []
    e = source.entries[-1]
    e.average_rank = float(Fraction(mean_printed_rank(e)) + 1)
    assert [k for k, _ in contradictions(source)] == ["average_rank_not_mean"]


def test_the_data_file_ships_with_the_package():
    import tomllib
    from importlib.resources import files
    from pathlib import Path

    assert json.loads(files("ava.published").joinpath("paper_table5.json").read_text())["format"]
    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert "paper_table5.json" in str(pyproject["tool"]["setuptools"]["package-data"]["ava.published"])


def test_one_function_returns_it_from_ava_and_the_report_help_names_it():
    from typer.testing import CliRunner

    import ava
    import ava.api
    from ava.cli.main import app

    assert ava.paper_table().title == ava.api.paper_table().title == paper_table().title
    help_text = " ".join(CliRunner().invoke(app, ["report", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "ava.paper_table()" in help_text and "--paper" in help_text


def test_results_show_paper_prints_the_table_and_its_flags():
    from typer.testing import CliRunner

    from ava.cli.main import app

    out = CliRunner().invoke(app, ["results", "show", "--paper"], env={"COLUMNS": "220"})
    assert out.exit_code == 0, out.output
    assert "72.25 (2) ⚑" in out.output and "color-siglip2" in out.output and "MiDas-3.0" in out.output
    data = json.loads(CliRunner().invoke(app, ["results", "show", "--paper", "--json"]).output)
    assert len(data["entries"]) == 9 and len(data["flags"]) == 8
    bad = CliRunner().invoke(app, ["results", "show"])
    assert bad.exit_code != 0 and "--paper" in bad.output
