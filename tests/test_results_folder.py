"""Results folders: `ava results export` writes one, another user's `ava report --published` reads it (local or at
an S3 URL) as it reads the paper's table; identity decides what is comparable; a malformed, truncated or planted
folder is refused by name before anything is written, and nothing in it is ever read as a zero."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ava.published import PublishedError, read_folder
from ava.report import build_report
from tests.helpers import main_streams, write_published_run

LAB = {  # the exporting lab's runs
    "siglip2": {"spatial": 0.9975, "counting": 0.2, "color": 10.0},
    "dinov2": {"spatial": 0.99, "counting": 0.3, "color": 21.0},
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> tuple[list[Path], Path]:
    root = tmp_path_factory.mktemp("lab")
    runs = [write_published_run(root / "runs", v, vals, identity="shared") for v, vals in LAB.items()]
    from ava.api import export_results

    export_results(runs, root / "results", title="Lab A fingerprints", n_boot=300)
    return runs, root / "results"


def test_export_writes_entries_an_index_with_digests_and_a_card(lab):
    runs, folder = lab
    index = json.loads((folder / "index.json").read_text())
    assert index["format"] == "ava-results" and index["title"] == "Lab A fingerprints"
    assert [e["file"] for e in index["entries"]] == [
        "llm_qwen2-0.5b_generate/dinov2.json",
        "llm_qwen2-0.5b_generate/siglip2.json",
    ]
    for line in index["entries"]:
        data = (folder / line["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == line["sha256"] and len(data) == line["bytes"]
    entry = json.loads((folder / "llm_qwen2-0.5b_generate/siglip2.json").read_text())
    assert (
        entry["head_id"] == "llm:qwen2-0.5b:generate"
        and entry["data_identity"]["per_ability"]["spatial"] == "shared-spatial"
    )
    assert entry["abilities"]["spatial"]["n"] == 400 and entry["run"]["results_sha256"] and entry["versions"]
    assert entry["run"]["config"]["data"] == "/data/shared"
    card = (folder / "README.md").read_text()
    assert "# Lab A fingerprints" in card and "ava report RUNS... --published" in card and "| siglip2 |" in card


def test_the_folder_reads_back_with_the_reports_own_intervals(lab):
    runs, folder = lab
    source = read_folder(str(folder))
    report = build_report(runs, n_boot=300)
    table = report["heads"]["llm:qwen2-0.5b:generate"]
    for e in source.entries:
        for ab, cell in e.cells.items():
            assert cell.value == pytest.approx(LAB[e.vfm][ab])
            assert list(cell.interval) == pytest.approx(table["intervals"][ab][e.vfm])  # the same draws
            assert cell.n == 400 and cell.sample_set


def test_another_users_runs_on_the_same_data_are_compared_without_a_data_banner(lab, tmp_path):
    _, folder = lab
    mine = write_published_run(
        tmp_path, "my-vfm", {"spatial": 0.995, "counting": 0.25, "color": 15.0}, identity="shared"
    )
    again = write_published_run(
        tmp_path, "siglip2", {"spatial": 0.9925, "counting": 0.21, "color": 11.0}, identity="shared"
    )
    report = build_report([mine, again], n_boot=200, published=[str(folder)])
    (block,) = report["published"]
    (cmp,) = block["comparisons"]
    assert cmp["same_head"] and cmp["banners"] == []
    rows = {r["id"]: r for r in cmp["rows"]}
    assert rows["ours:my-vfm"]["cells"]["spatial"]["rank"] == 1  # 99.5, then siglip2 99.25 (ours), dinov2 99.0
    assert rows["published:siglip2"]["replaced_by"] == "siglip2"
    (d,) = cmp["diff"]
    assert d["vfm"] == "siglip2" and d["abilities"]["spatial"]["published_half_digit"] == 0.0
    assert cmp["settings_differ"] == []


def test_runs_on_other_data_get_a_banner_naming_the_abilities(lab, tmp_path):
    _, folder = lab
    other = write_published_run(tmp_path, "my-vfm", {"spatial": 0.995, "counting": 0.25}, identity="other")
    (cmp,) = build_report([other], n_boot=200, published=[str(folder)])["published"][0]["comparisons"]
    text = " ".join(cmp["banners"])
    assert "other data on spatial, counting" in text and "not comparable" in text


def test_a_probe_run_against_an_llm_folder_is_shown_apart(lab, tmp_path):
    _, folder = lab
    probe = write_published_run(tmp_path, "my-vfm", {"spatial": 0.995}, head="knn", llm=None, identity="shared")
    (block,) = build_report([probe], n_boot=200, published=[str(folder)])["published"]
    assert block["comparisons"] == [] and block["apart"][0]["head_id"] == "knn"


def test_cli_export_adds_refuses_a_second_copy_and_replaces_with_force(tmp_path, capsys):
    a = write_published_run(tmp_path / "runs", "siglip2", LAB["siglip2"])
    b = write_published_run(tmp_path / "runs", "dinov2", LAB["dinov2"])
    out = tmp_path / "res"
    assert main_streams(["results", "export", str(a), "--out", str(out)], capsys)[0] == 0
    code, stdout, _ = main_streams(["results", "export", str(b), "--out", str(out)], capsys)
    assert code == 0 and "2 entries" in stdout
    code, _, err = main_streams(["results", "export", str(a), "--out", str(out)], capsys)
    assert code == 2 and "already holds llm_qwen2-0.5b_generate/siglip2.json" in err and "--force" in err
    assert main_streams(["results", "export", str(a), "--out", str(out), "--force"], capsys)[0] == 0
    assert {e.vfm for e in read_folder(str(out)).entries} == {"siglip2", "dinov2"}
    (tmp_path / "not-results").mkdir()
    (tmp_path / "not-results" / "notes.txt").write_text("mine")
    code, _, err = main_streams(["results", "export", str(a), "--out", str(tmp_path / "not-results")], capsys)
    assert (
        code == 2 and "not a results folder" in err and (tmp_path / "not-results" / "notes.txt").read_text() == "mine"
    )


# -- bad folders --------------------------------------------------------------------------------------------------
def _copy(folder: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(folder, to)
    return to


def _rewrite(folder: Path, rel: str, change) -> None:
    """Change an entry and re-sign it in the index, so only the entry's own checks can catch it."""
    path = folder / rel
    text = path.read_text()
    new = change(text)
    path.write_text(new)
    index = json.loads((folder / "index.json").read_text())
    for line in index["entries"]:
        if line["file"] == rel:
            line["sha256"] = hashlib.sha256(new.encode()).hexdigest()
            line["bytes"] = len(new.encode())
    (folder / "index.json").write_text(json.dumps(index))


SIGLIP2 = "llm_qwen2-0.5b_generate/siglip2.json"


def _set(field: str, value: str):
    def change(text: str) -> str:
        data = json.loads(text)
        data["abilities"]["spatial"][field] = "@@"
        return json.dumps(data).replace('"@@"', value)

    return change


BAD = {
    "truncated entry": (lambda f: (f / SIGLIP2).write_text((f / SIGLIP2).read_text()[:200]), "truncated or changed"),
    "edited entry": (
        lambda f: (f / SIGLIP2).write_text((f / SIGLIP2).read_text().replace("0.9975", "0.9985")),
        "SHA-256",
    ),
    "planted entry": (lambda f: (f / "llm_qwen2-0.5b_generate/evil.json").write_text("{}"), "not listed in index.json"),
    "no index": (lambda f: (f / "index.json").unlink(), "no index.json"),
    "truncated index": (lambda f: (f / "index.json").write_text((f / "index.json").read_text()[:50]), "not valid JSON"),
    "path outside": (
        lambda f: (f / "index.json").write_text((f / "index.json").read_text().replace(SIGLIP2, "../../etc/x.json")),
        "inside the folder",
    ),
    "NaN value": (lambda f: _rewrite(f, SIGLIP2, _set("value", "NaN")), "NaN is not a number"),
    "percent for a fraction": (lambda f: _rewrite(f, SIGLIP2, _set("value", "99.75")), "outside accuracy's range"),
    "null value with samples": (lambda f: _rewrite(f, SIGLIP2, _set("value", "null")), "a score needs samples"),
    "value as text": (lambda f: _rewrite(f, SIGLIP2, _set("value", '"0.9"')), "finite number or null"),
    "n as a boolean": (lambda f: _rewrite(f, SIGLIP2, _set("n", "true")), "must be a count"),
    "n missing": (lambda f: _rewrite(f, SIGLIP2, _set("n", "null")), "must be a count"),
    "another metric": (lambda f: _rewrite(f, SIGLIP2, _set("metric", '"anls"')), "ava scores spatial with accuracy"),
    "future format": (
        lambda f: _rewrite(f, SIGLIP2, lambda t: t.replace('"format_version": 1', '"format_version": 9')),
        "version 1",
    ),
    "moved entry": (
        lambda f: _rewrite(f, SIGLIP2, lambda t: t.replace('"vfm": "siglip2"', '"vfm": "dinov2"')),
        "belongs in llm_qwen2-0.5b_generate/dinov2.json",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_folder_is_refused_by_name_and_the_report_writes_nothing(lab, tmp_path, capsys, case):
    runs, folder = lab
    bad = _copy(folder, tmp_path / "bad")
    breaks, fragment = BAD[case]
    breaks(bad)
    with pytest.raises(PublishedError, match=None) as caught:
        read_folder(str(bad))
    assert fragment in str(caught.value) and str(bad) in str(caught.value), str(caught.value)
    out = tmp_path / "report"
    code, _, err = main_streams(["report", str(runs[0]), "--out", str(out), "--published", str(bad), "-q"], capsys)
    assert code == 2 and fragment in err and "Traceback" not in err
    assert not out.exists()


def test_a_missing_folder_and_a_credential_in_the_url_are_refused(capsys, tmp_path, lab):
    runs, _ = lab
    code, _, err = main_streams(
        ["report", str(runs[0]), "--out", str(tmp_path / "r"), "--published", str(tmp_path / "nope")], capsys
    )
    assert code == 2 and "no such folder" in err
    code, _, err = main_streams(
        ["report", str(runs[0]), "--out", str(tmp_path / "r"), "--published", "s3://KEY:hunter2@b/x"], capsys
    )
    assert code == 2 and "--published" in err and "hunter2" not in err


@pytest.mark.slow
def test_a_folder_at_an_s3_url(lab, s3_url, tmp_path):
    runs, _ = lab
    from ava.api import export_results, load_published, make_report

    export_results(runs, s3_url, title="in a bucket", n_boot=200)
    source = load_published(s3_url)
    assert source.title == "in a bucket" and {e.vfm for e in source.entries} == set(LAB)
    mine = write_published_run(tmp_path, "my-vfm", {"spatial": 0.995}, identity="shared")
    report = make_report([mine], tmp_path / "r", n_boot=200, published=s3_url).data
    assert report["published"][0]["comparisons"][0]["banners"] == []
