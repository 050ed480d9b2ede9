"""`ava report` over fixture run directories written here in the results schema (docs/metrics.md)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from ava.cli.main import app
from ava.errors import AvaError
from ava.report import build_report, make_report
from ava.report.render import markdown
from ava.report.strict_json import loads_strict
from tests.helpers import RUN_VALUES, heading_anchors, write_run

# head -> vfm -> ability -> value


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("runs")
    return [
        write_run(root, h, v, vals, random_weights=(v == "random"))
        for h, d in RUN_VALUES.items()
        for v, vals in d.items()
    ]


SECTIONS: list = []  # the progress bar the module's report went through (a _Recorder, below)


@pytest.fixture(scope="module")
def report(run_dirs, tmp_path_factory) -> tuple[dict, Path]:
    import ava.progress

    out = tmp_path_factory.mktemp("report")
    SECTIONS.append(_Recorder())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ava.progress, "progress", lambda enabled, *a, **k: SECTIONS[-1])
        return make_report(run_dirs, out, n_boot=500, progress=True), out


def test_table5_ranks_respect_direction_and_ties(report):
    rep, _ = report
    knn = rep["heads"]["knn"]
    assert knn["ranks"]["counting"] == {"big": 1.0, "small": 2.0, "random": 3.0}  # lower MAE/GT is better
    assert knn["ranks"]["spatial"] == {"big": 1.0, "small": 2.0, "random": 3.0}
    assert knn["ranks"]["ocr"] == {"big": 1.5, "small": 1.5, "random": 3.0}  # tie -> average rank
    probe = rep["heads"]["probe-linear"]
    assert probe["ranks"]["color"] == {"big": 1.5, "small": 1.5, "random": 3.0}
    # probe: big = 2,2,1,1.5 -> 1.625 ; small = 1,1,2,1.5 -> 1.375 ; random = 3
    assert probe["average_rank"] == pytest.approx({"big": 1.625, "small": 1.375, "random": 3.0})
    assert probe["vfms"] == ["small", "big", "random"]  # best average rank first
    assert knn["random_weights"] == {"big": False, "small": False, "random": True}
    assert knn["synthetic"] is True and knn["splits"] == ["test (split of the synthetic suite)"]


def test_rank_agreement_between_heads(report):
    rep, _ = report
    (agr,) = rep["agreement"]
    assert agr["heads"] == ["knn", "probe-linear"]
    # counting: knn big<small<random, probe small<big<random -> 1 discordant pair of 3: tau = 1/3, rho = 0.5
    assert agr["abilities"]["counting"]["kendall_tau"] == pytest.approx(1 / 3)
    assert agr["abilities"]["counting"]["spearman_rho"] == pytest.approx(0.5)
    # average ranks: knn big 1.125, small 1.875, random 3 ; probe big 1.625, small 1.375, random 3 -> same as counting
    assert agr["average_rank"]["kendall_tau"] == pytest.approx(1 / 3)
    assert agr["average_over"] == ["counting", "ocr", "spatial", "color"]


def test_subgroups(report):
    rep, _ = report
    g = rep["subgroups"]["knn"]["counting"]["count_range"]
    assert g["bins"] == ["<=5", "6-10"]
    assert g["values"]["<=5"]["big"] == {"value": pytest.approx(0.05), "n": 25}


def test_report_md_json_tex(report):
    rep, out = report
    md = (out / "report.md").read_text()
    assert "### Head: knn" in md and "### Head: probe-linear" in md
    assert "| ability | metric | n | chance | majority | big | small | random (random weights) |" in md
    # value [95% bootstrap interval] (rank); n per ability; no dataset here, so no baselines
    cell = r"0\.1000 \[0\.0\d{3}, 0\.1\d{3}\] \(1\) \| 0\.3000 \["  # value and interval to the same decimals
    assert re.search(r"\| counting \| mae_gt ↓ \| 40 \| n/a \| n/a \| " + cell, md)
    assert "(1.5~)" in md  # ocr: big and small tie exactly
    assert "Average rank over 4 abilities: counting, ocr, spatial, color." in md
    assert "split: test (split of the synthetic suite)" in md and "data: synthetic" in md
    assert "### knn vs probe-linear" in md and "+0.333" in md
    assert "heads: knn (test (split of the synthetic suite), synthetic data) vs probe-linear" in md
    assert "### knn · counting by count_range" in md
    assert "3 of 40 replies unparsed" in md
    assert loads_strict((out / "report.json").read_text())["heads"]["knn"]["vfms"] == ["big", "small", "random"]
    tex = (out / "report.tex").read_text()
    assert r"\toprule" in tex and r"mae\_gt $\downarrow$" in tex and "95\\% bootstrap interval" in tex
    assert re.search(r"0\.1000 \[0\.0\d{3}, 0\.1\d{3}\] \(1\)", tex)


def test_plots_are_valid_non_blank_images(report):
    rep, out = report
    files = [f for kinds in rep["plots"].values() for names in kinds.values() for f in names]
    # no dataset behind these runs: no baselines, so no normalized plot and no radar (never min-max across VFMs)
    assert {Path(f).name for f in files} >= {"knn-bars.png", "knn-bars.svg", "probe-linear-ranks.png"}
    assert not any("radar" in f or "normalized" in f for f in files)
    for f in files:
        path = out / f
        assert path.is_file(), f
        assert f"]({f})" in (out / "report.md").read_text() or f.endswith(".svg")
        if f.endswith(".png"):
            with Image.open(path) as im:
                pixels = np.asarray(im.convert("RGB"), dtype=float)
            assert pixels.std() > 0, f"{f} is blank"
        else:
            assert ET.parse(path).getroot().tag.endswith("svg")


def test_missing_and_malformed_files_name_the_run(run_dirs, tmp_path):
    bad = tmp_path / "bad-run"
    bad.mkdir()
    (bad / "run.json").write_text(json.dumps({"head": "knn", "vfm": "x"}))
    with pytest.raises(AvaError, match=r"bad-run.*results_test.json is missing"):
        build_report([bad])
    (bad / "results_test.json").write_text("{not json")
    with pytest.raises(AvaError, match=r"bad-run.*not valid JSON"):
        build_report([bad])
    (bad / "results_test.json").write_text(
        json.dumps({"abilities": {"ocr": {"metric": "anls", "value": "high", "higher_is_better": True}}})
    )
    with pytest.raises(AvaError, match=r"bad-run.*abilities.ocr.value"):
        build_report([bad])
    with pytest.raises(AvaError, match="both head 'knn' on VFM 'big'"):
        build_report([run_dirs[0], run_dirs[0]])


def test_single_vfm_agreement_is_na(tmp_path):
    runs = [write_run(tmp_path, h, "only", RUN_VALUES[h]["big"]) for h in RUN_VALUES]
    rep = build_report(runs)
    agr = rep["agreement"][0]
    assert agr["average_rank"]["kendall_tau"] is None
    assert agr["average_rank"]["reason"] == "n/a: needs >= 3 VFMs in common (has 1)"


def test_random_llm_is_not_a_random_vfm(tmp_path):
    # an LLM head with a random LLM: the run is random, the VFM is not; the head label says which
    extra = {"llm": "tiny-random-qwen2", "llm_random_weights": True, "vfm_random_weights": False}
    runs = [
        write_run(tmp_path, "llm", v, RUN_VALUES["knn"][v], random_weights=True, extra=extra) for v in ("big", "small")
    ]
    rep = build_report(runs)
    (head,) = rep["heads"]
    assert head == "llm:tiny-random-qwen2"  # a stable id; the label says more
    assert rep["heads"][head]["head"] == "llm (tiny-random-qwen2, random weights)"
    assert rep["heads"][head]["random_weights"] == {"big": False, "small": False}
    assert rep["heads"][head]["head_random_weights"] is True
    md = markdown(rep)
    assert "| llm (tiny-random-qwen2, random weights) | big | real | **LLM** |" in md
    assert "the head's LLM has random weights" in md


@pytest.mark.slow
def test_cli_report(run_dirs, tmp_path):
    out = tmp_path / "rep"
    result = CliRunner().invoke(app, ["report", *map(str, run_dirs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "report.md").is_file() and (out / "plots" / "knn-ranks.svg").is_file()
    assert "Head: knn" in result.output and "random weights" in result.output


def test_every_written_json_is_strict(report, run_dirs):
    _, out = report
    files = [*out.rglob("*.json"), *(r / "results_test.json" for r in run_dirs)]
    for path in files:
        loads_strict(path.read_text())  # raises on NaN / Infinity
    assert len(files) >= 7


def test_weights_of_a_vfm_at_another_size_are_its_base_vfms(tmp_path):
    """``NAME#size=S`` is NAME's weights at another input size: raw pixels stay weightless, a registered model names
    where its weights come from (the demo's ``pixels#size=160`` once read "real")."""
    names = ("pixels#size=96", "siglip#size=224", "effnet-lite0#size=160")
    runs = [write_run(tmp_path, "knn", v, RUN_VALUES["knn"]["big"]) for v in names]
    weights = {r["vfm"]: r["weights"] for r in build_report(runs, n_boot=0)["runs"]}
    assert weights == {
        "pixels#size=96": "none (raw pixels)",
        "siglip#size=224": "real: google/siglip-so400m-patch14-384",
        "effnet-lite0#size=160": "real: an installed package",
    }


def test_opening_hook_opens_the_report(run_dirs):
    rep = build_report(run_dirs[:3], n_boot=100, opening=["`big` leads on counting.", "`small` on nothing."])
    assert rep["opening"] == ["`big` leads on counting.", "`small` on nothing."]
    md = markdown(rep)
    assert md.startswith("# AVA-Bench report\n\n## What the fingerprints show\n\n- `big` leads on counting.\n")
    assert md.index("`small` on nothing.") < md.index("## Runs")


# -- a results file's numbers are checked where it is read ---------------------------------------------------------
GOOD_ABILITY = {
    "metric": "accuracy",
    "value": 0.5,
    "higher_is_better": True,
    "n": 10,
    "n_unparsed": 1,
    "subgroups": {"count": {"<=5": {"value": 0.5, "n": 4}}},
}


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"n": -5}, r"abilities.color.n must be a count \(an integer >= 0\), not -5"),
        ({"n": "ten"}, r"abilities.color.n must be a count .*not 'ten'"),
        ({"n": 2.5}, r"abilities.color.n must be a count .*not 2.5"),
        ({"n": True}, r"abilities.color.n must be a count .*not True"),
        ({"n": 1e999}, r"abilities.color.n must be a count .*not inf"),
        ({"n_unparsed": -1}, r"abilities.color.n_unparsed must be a count"),
        ({"n_unparsed": 11}, r"abilities.color: n_unparsed 11 is more than n 10"),
        ({"value": float("nan")}, r"abilities.color.value must be finite for 10 scored samples, not nan"),
        ({"value": float("inf")}, r"abilities.color.value must be finite for 10 scored samples, not inf"),
        ({"value": [0.5]}, r"abilities.color.value must be a number or null, not \[0.5\]"),
        ({"metric": ["accuracy"]}, r"abilities.color.metric must be the metric's name"),
        (
            {"subgroups": {"count": {"<=5": {"value": 0.5, "n": -4}}}},
            r"abilities.color.subgroups.count.<=5.n must be a count",
        ),
        (
            {"subgroups": {"count": {"<=5": {"value": "high", "n": 4}}}},
            r"abilities.color.subgroups.count.<=5.value must be a finite",
        ),
        ({"subgroups": {"count": {"<=5": 0.5}}}, r"abilities.color.subgroups.count.<=5 must be an object"),
    ],
)
def test_a_results_number_out_of_range_is_named_with_the_run_file_and_field(tmp_path, change, fragment):
    from ava.report.load import load_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"head": "knn", "vfm": "pixels"}))
    (run / "results_test.json").write_text(json.dumps({"abilities": {"color": {**GOOD_ABILITY, **change}}}))
    with pytest.raises(AvaError, match=rf"^run {re.escape(str(run))}: results_test.json: {fragment}"):
        load_run(run)


def test_a_results_file_in_range_loads(tmp_path):
    from ava.report.load import load_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"head": "knn", "vfm": "pixels"}))
    empty = {**GOOD_ABILITY, "n": 0, "n_unparsed": 0, "value": float("nan")}  # nothing scored: shown as not scored
    (run / "results_test.json").write_text(json.dumps({"abilities": {"color": GOOD_ABILITY, "ocr": empty}}))
    loaded = load_run(run)
    assert loaded.abilities["color"].n == 10 and loaded.abilities["ocr"].value is None


def test_report_md_and_html_open_with_a_table_of_contents_whose_links_all_land(report):

    _, out = report
    md = (out / "report.md").read_text()
    assert md.startswith("# AVA-Bench report\n\n**Contents**\n\n- [Runs](#runs)\n")
    links = re.findall(r"^\s*- \[.*\]\(#([^)]+)\)$", md, re.M)
    headings = re.findall(r"^#{2,3} .*$", md, re.M)
    assert len(links) == len(headings) >= 6 and set(links) <= heading_anchors(md), set(links) - heading_anchors(md)
    page = (out / "report.html").read_text()
    nav = re.search(r'<nav class="contents">(.*?)</nav>', page, re.S).group(1)
    targets = re.findall(r'href="#([^"]+)"', nav)
    ids = re.findall(r'<h[23][^>]* id="([^"]+)"', page)
    assert targets and set(targets) == set(ids) and len(ids) == len(set(ids))  # every heading listed, ids unique


@pytest.mark.parametrize(
    ("value", "ci", "sig", "shown"),
    [
        (1.1428, [1.1431, 1.4642], 3, "1.14 [1.14, 1.46]"),  # the rank: no longer outside its interval
        (0.5, [0.4213, 0.5875], 4, "0.5000 [0.4213, 0.5875]"),  # a round value keeps the interval's decimals
        (12.3456, [9.8765, 15.1234], 4, "12.35 [9.88, 15.12]"),
        (0.0, [0.0, 0.01234], 4, "0.000 [0.000, 0.012]"),
        (12345.6, [12000.4, 13000.6], 4, "12346 [12000, 13001]"),
        (float("nan"), None, 4, "nan"),
    ],
)
def test_an_interval_is_rounded_as_its_value(value, ci, sig, shown):
    from ava.report.render import fmt_with_ci

    assert fmt_with_ci(value, ci, sig) == shown


def test_a_printed_value_never_falls_outside_its_printed_interval():
    from ava.report.render import fmt_with_ci

    rng = np.random.default_rng(0)
    for _ in range(2000):
        scale = 10.0 ** rng.integers(-4, 5)
        lo, x, hi = np.sort(rng.random(3) * scale)
        text = fmt_with_ci(float(x), [float(lo), float(hi)], sig=int(rng.integers(2, 5)))
        v, a, b = (float(t) for t in re.findall(r"[-\d.e+]+", text.replace(",", " ")))
        assert a <= v <= b, text


class _Recorder:
    """Stands for the progress bar: records each section's description, the total and the steps."""

    def __init__(self) -> None:
        self.descriptions: list[str] = []
        self.total = self.done = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, description: str, total: int) -> int:
        self.total = total
        return 0

    def update(self, task: int, description: str | None = None, total: int | None = None) -> None:
        self.descriptions += [description] if description else []
        self.total = total if total is not None else self.total

    def advance(self, task: int) -> None:
        self.done += 1


def test_a_report_says_each_section_as_it_goes_and_ends_full(report, run_dirs):
    bar = SECTIONS[-1]
    assert bar.descriptions[0] == f"report: reading {len(run_dirs)} runs"
    assert "report: 500 bootstrap replicates per score, ranks" in bar.descriptions
    assert "report: plots of knn" in bar.descriptions and bar.descriptions[-1].startswith("report: report.html")
    assert bar.done == bar.total == len(bar.descriptions)
