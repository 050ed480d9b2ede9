"""The report's FOCI and paper analyses: scores relative to a reference VFM (table + plot) and the alignment gap
(a VLM's accuracy split by whether the zero-shot head got each question right). Tiny checkpoints are RANDOM."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ava.errors import AvaError
from tests.helpers import save_tiny_image_text, save_tiny_vlm


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, choice_data: Path) -> dict[str, Path]:
    import ava

    root = tmp_path_factory.mktemp("rep")
    data = choice_data
    clip = save_tiny_image_text(root / "clip", "clip")
    vlm = save_tiny_vlm(root / "llava", "llava")
    out = {}
    out["zs"] = ava.train_head(
        "zero-shot", vfm=f"tiny-clip@{clip}", data=str(data), out=str(root / "zs"), progress=False
    ).run_dir
    out["vlm"] = ava.vlm_answer(vlm, data, root / "vlm", max_new_tokens=3, random_weights=True).run_dir
    for vfm in ("pixels#size=32", "pixels#size=16"):
        ava.extract(vfm=vfm, data=data, cache=root / "cache")
        fp = ava.fingerprint(vfm, data, root / "cache", root / "runs", heads=["knn"])
        out[vfm] = fp.run_dirs["knn"]
    return out


@pytest.mark.slow
def test_vlm_is_split_by_the_zero_shot_heads_correctness(runs: dict[str, Path], tmp_path: Path) -> None:
    import ava

    report = ava.make_report([runs["vlm"], runs["zs"]], tmp_path / "r", n_boot=100).data
    (gap,) = report["alignment"]
    rec = gap["abilities"]["recognition"]
    assert gap["run_head"].startswith("vlm") and gap["reference_head"] == "zero-shot"
    assert rec["n"] == 8 and rec["n_reference_right"] + rec["n_reference_wrong"] == 8
    zs = {
        r["id"]: r["score"]
        for r in map(json.loads, (runs["zs"] / "predictions_test.jsonl").read_text().splitlines())
        if r["ava"] == "recognition"
    }
    assert rec["n_reference_right"] == sum(v >= 1 for v in zs.values())
    assert rec["gap"] == pytest.approx(rec["reference"] - rec["run"])
    assert "## Alignment gap" in (tmp_path / "r" / "report.md").read_text()
    assert re.search(r"<h2 id=\"[^\"]+\">Alignment gap", (tmp_path / "r" / "report.html").read_text())
    # a run against itself: always right where the reference is right, never where it is wrong
    (self_gap,) = ava.make_report([runs["zs"]], tmp_path / "s", n_boot=100, gaps=[(runs["zs"], runs["zs"])]).data[
        "alignment"
    ]
    rec = self_gap["abilities"]["recognition"]
    assert rec["run_where_reference_right"] in (None, 1.0) and rec["run_where_reference_wrong"] in (None, 0.0)
    assert rec["gap"] == 0.0


def test_scores_relative_to_a_reference_vfm(runs: dict[str, Path], tmp_path: Path) -> None:
    import ava

    report = ava.make_report(
        [runs["pixels#size=32"], runs["pixels#size=16"]], tmp_path / "r", n_boot=100, reference="pixels#size=16"
    ).data
    block = report["relative"]["knn"]
    table = report["heads"]["knn"]
    for ab, row in block["values"].items():
        assert row["pixels#size=16"] in (1.0, None)
        ref, v = table["values"][ab]["pixels#size=16"], table["values"][ab]["pixels#size=32"]
        if row["pixels#size=32"] is not None:
            expected = v / ref if table["higher_is_better"][ab] else ref / v
            assert row["pixels#size=32"] == pytest.approx(expected)
    assert (tmp_path / "r" / "plots" / "relative-knn.png").is_file()
    assert "## Scores relative to a reference VFM" in (tmp_path / "r" / "report.md").read_text()
    page = (tmp_path / "r" / "report.html").read_text()
    assert re.search(r'<h2 id="[^"]+">Scores relative to a reference VFM</h2>', page)
    assert 'alt="relative scores"' in page
    with pytest.raises(AvaError, match=r"--reference 'dinov2': no run of that VFM among the runs"):
        ava.make_report([runs["pixels#size=32"]], tmp_path / "x", n_boot=100, reference="dinov2")
