"""``ava report --paper``: the user's runs ranked among the paper's nine, ours - paper with the interval verdict,
flagged cells, banners for data that is not the paper's, and the bad inputs a user brings (a probe head, a VFM the
paper lacks, two runs of one VFM, a partial ability set, synthetic data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ava.cli.main import app
from ava.errors import AvaError
from ava.report import build_report, make_report
from ava.report.ranks import rank_values
from tests.helpers import SYNTHETIC_SPLIT, main_streams, write_published_run

OURS = {  # ability values in ava's units (accuracies are multiples of 1/400)
    "siglip2": {"spatial": 0.9975, "emotion": 0.6, "counting": 0.2, "color": 10.0},
    "dinov2": {"spatial": 0.99, "emotion": 0.55, "counting": 0.3, "color": 21.0},
    "my-vfm": {"spatial": 0.95, "emotion": 0.7, "counting": 0.25, "color": 15.0},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("runs")
    return [write_published_run(root, v, vals) for v, vals in OURS.items()]


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("report")
    return make_report(runs, out, n_boot=300, paper=True), out


def _cmp(report: dict) -> dict:
    (block,) = report["published"]
    (cmp,) = block["comparisons"]
    return cmp


def test_user_vfms_are_ranked_among_the_papers_nine_from_values(report):
    from ava.published import paper_table

    cmp = _cmp(report[0])
    rows = {r["id"]: r for r in cmp["rows"]}
    assert {r["id"] for r in cmp["rows"] if r["ranked"]} == {
        "ours:siglip2",
        "ours:dinov2",
        "ours:my-vfm",
        *(f"published:{k}" for k in ("aimv2", "siglip", "clip", "internvit", "radio", "sam", "midas")),
    }
    assert cmp["n_ranked"] == 10
    # the two VFMs re-ran replace their published rows in the ranking, which stay shown, unranked
    assert rows["published:siglip2"]["replaced_by"] == "siglip2" and rows["published:siglip2"]["average_rank"] is None
    assert rows["published:dinov2"]["cells"]["spatial"]["rank"] is None
    # every ability's ranks, recomputed by hand from the values (ties share their average rank)
    source = paper_table()
    for ab in cmp["abilities"]:
        col = source.columns[ab]
        values = {f"ours:{v}": vals[ab] for v, vals in OURS.items() if ab in vals}
        values |= {
            f"published:{e.vfm}": e.cells[ab].value
            for e in source.entries
            if e.vfm not in OURS and not source.excluded(e.vfm, ab)
        }
        expected = rank_values(values, col.higher_is_better)
        got = {rid: r["cells"][ab]["rank"] for rid, r in rows.items() if r["ranked"] and ab in r["cells"]}
        assert got == {rid: expected.get(rid) for rid in got}, ab
    # spatial by hand: 99.75 beats RADIO's 99.69, so siglip2 is first and RADIO second
    assert (
        rows["ours:siglip2"]["cells"]["spatial"]["rank"] == 1
        and rows["published:radio"]["cells"]["spatial"]["rank"] == 2
    )
    # the average over the abilities every ranked row has: here all four of ours (colour too: SigLIP-2 was re-run)
    assert set(cmp["average_over"]) == set(OURS["siglip2"])
    ranks = [rows["ours:siglip2"]["cells"][ab]["rank"] for ab in cmp["average_over"]]
    assert rows["ours:siglip2"]["average_rank"] == pytest.approx(sum(ranks) / len(ranks))


def test_the_papers_printed_average_ranks_stand_beside_the_recomputed_ones(report):
    cmp = _cmp(report[0])
    rows = {r["id"]: r for r in cmp["rows"]}
    clip = rows["published:clip"]
    assert clip["printed_average_rank"] == 4.9 and clip["average_rank_flag"] == "average-rank-clip"
    assert clip["mean_printed_ranks"] == pytest.approx(71 / 14)
    assert clip["average_rank_alone"] is not None and len(cmp["average_over_alone"]) == 13  # colour: SigLIP-2 flagged
    assert "color" not in cmp["average_over_alone"]
    notes = " ".join(cmp["average_rank_notes"])
    assert "CLIP 4.9 vs 5.07" in notes and "color" in notes and "among 10 rows" in notes


def test_ours_minus_paper_with_the_interval_verdict_for_every_shared_ability(report):
    cmp = _cmp(report[0])
    diffs = {d["vfm"]: d for d in cmp["diff"]}
    assert set(diffs) == {"siglip2", "dinov2"}  # matched by registry key; my-vfm has no published row
    d = diffs["dinov2"]
    assert set(d["abilities"]) == set(OURS["dinov2"])
    for ab, c in d["abilities"].items():
        lo, hi = c["interval"]
        half = c["published_half_digit"]
        assert c["difference"] == pytest.approx(c["ours"] - c["published"])
        assert c["inside"] == (lo - half <= c["published"] <= hi + half), ab
        assert c["verdict"] == ("inside" if c["inside"] else "outside")
    assert d["abilities"]["spatial"]["shown"]["published"] == 99.5  # the paper's scale: %
    assert d["abilities"]["spatial"]["shown"]["difference"] == pytest.approx(-0.5)
    # the paper's colour cell for SigLIP-2 is flagged: not judged
    c = diffs["siglip2"]["abilities"]["color"]
    assert c["inside"] is None and "flagged" in c["verdict"]
    assert diffs["siglip2"]["judged"] == 3


def test_flagged_cells_are_shown_as_published_and_left_out_of_the_ranks(report):
    cmp = _cmp(report[0])
    rows = {r["id"]: r for r in cmp["rows"]}
    spatial = rows["published:internvit"]["cells"]["spatial"]
    assert spatial["shown"] == 99.5 and spatial["printed_rank"] == 4 and spatial["flag"] == "spatial-tie"
    (block,) = report[0]["published"]
    own = {r["vfm"]: r for r in block["table"][0]["rows"]}
    color = own["siglip2"]["cells"]["color"]
    assert color["printed"] == 72.25 and color["printed_rank"] == 2 and color["excluded"] and color["rank"] is None
    assert block["table"][0]["left_out"] == {"color": "the published value of SigLIP-2 is flagged"}
    # the tie shares its rank where the table printed 2, 4 and 3
    assert {own[v]["cells"]["spatial"]["rank"] for v in ("siglip2", "internvit", "dinov2")} == {3.0}


def test_md_html_tex_and_json_show_the_published_rows(report):
    data, out = report
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    tex = (out / "report.tex").read_text()
    for text in (md, html):
        assert "published, not re-run" in text and "Beside published results" in text
        assert "color-siglip2" in text and "spatial-tie" in text and "average-rank-dinov2" in text
        assert "Ours - published: dinov2 vs DINOv2" in text
    assert "SigLIP-2 (siglip2)" in md and "replaced in the ranks by your siglip2" in md
    assert "published, not re-run" in tex and r"\begin{tabular}" in tex
    assert "Published results, as published" in md
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["published"][0]["source"]["title"].startswith("AVA-Bench paper")


def test_a_split_made_by_ava_says_so_and_synthetic_data_is_not_comparable(report, tmp_path):
    banners = " ".join(_cmp(report[0])["banners"])
    assert "`ava data split`" in banners and "not public" in banners
    run = write_published_run(tmp_path, "siglip2", OURS["siglip2"], synthetic=True, split=SYNTHETIC_SPLIT)
    synthetic = build_report([run], n_boot=200, paper=True)
    banners = " ".join(_cmp(synthetic)["banners"])
    assert "synthetic data" in banners and "not comparable" in banners


def test_settings_that_differ_from_the_papers_are_listed(tmp_path):
    run = write_published_run(
        tmp_path, "siglip2", OURS["siglip2"], llm="tiny-random-qwen2", config={"epochs": 1, "lora_r": 8}
    )
    cmp = _cmp(build_report([run], n_boot=200, paper=True))
    line = " ".join(cmp["settings_differ"])
    assert "LLM: tiny-random-qwen2 here; qwen2-0.5b published" in line
    assert "LoRA rank: 8 here; 128 published" in line and "epochs: 1 here" in line
    assert "stages 1-2: none" in line and "global batch" not in line  # 16, the paper's, by default
    assert cmp["same_head"] is False  # llm:tiny-random-qwen2:generate vs llm:qwen2-0.5b:generate: ranked, with the line


def test_a_probe_head_is_shown_apart_never_ranked_with_the_llm_head(tmp_path):
    run = write_published_run(tmp_path, "siglip2", OURS["siglip2"], head="probe-linear", llm=None)
    report = build_report([run], n_boot=200, paper=True)
    (block,) = report["published"]
    assert block["comparisons"] == []
    (apart,) = block["apart"]
    assert apart["head_id"] == "probe-linear" and "not ranked together" in apart["reason"]
    assert block["table"][0]["rows"]  # the paper's own table is still shown


def test_a_partial_ability_set_averages_over_what_every_row_has(tmp_path):
    run = write_published_run(tmp_path, "my-vfm", {"spatial": 0.95, "color": 15.0})
    cmp = _cmp(build_report([run], n_boot=200, paper=True))
    assert cmp["average_over"] == ["spatial"]  # colour: SigLIP-2's published value is flagged
    reasons = " ".join(f"{k}: {v}" for k, v in cmp["left_out"].items())
    assert "color: the published value of SigLIP-2 is flagged" in reasons
    assert "no score in your run of my-vfm" in reasons and "counting" in reasons
    assert cmp["diff"] == []  # the paper has no my-vfm


def test_a_variant_of_a_paper_vfm_is_not_matched_to_its_row(tmp_path):
    run = write_published_run(tmp_path, "siglip2#size=224", OURS["siglip2"], name="llm-siglip2-224")
    cmp = _cmp(build_report([run], n_boot=200, paper=True))
    assert cmp["diff"] == [] and {r["vfm"] for r in cmp["rows"] if r["kind"] == "published" and r["ranked"]} >= {
        "siglip2"
    }


def test_two_runs_of_the_same_vfm_and_head_are_refused_by_name(tmp_path, capsys):
    a = write_published_run(tmp_path, "siglip2", OURS["siglip2"], name="a")
    b = write_published_run(tmp_path, "siglip2", OURS["siglip2"], name="b")
    with pytest.raises(AvaError, match="both head .* on VFM 'siglip2'"):
        build_report([a, b], n_boot=200, paper=True)
    code, _, err = main_streams(["report", str(a), str(b), "--out", str(tmp_path / "rep"), "--paper", "-q"], capsys)
    assert code == 2 and "pass only one of them" in err and "Traceback" not in err
    assert not (tmp_path / "rep").exists()


def test_cli_report_paper_prints_the_comparison(runs, tmp_path):
    result = CliRunner().invoke(
        app,
        ["report", *map(str, runs), "--out", str(tmp_path / "r"), "--paper", "--n-boot", "200"],
        env={"COLUMNS": "250"},
    )
    assert result.exit_code == 0, result.output
    assert "beside AVA-Bench paper" in result.output and "ours - published: siglip2 vs SigLIP-2" in result.output
    assert "not comparable as such" in result.output
