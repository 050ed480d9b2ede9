"""The calibration of the synthetic suite: verdict rules, chance levels, and a small end-to-end table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ava.synth.calibrate import CalibrateConfig, calibrate, table_lines, verdict


def test_verdict_rules() -> None:
    rng = np.random.default_rng(0)
    chance = (rng.random(60) < 0.1).astype(float)
    perfect = np.ones(60)
    good, fair = (rng.random(60) < 0.9).astype(float), (rng.random(60) < 0.35).astype(float)
    assert verdict("accuracy", True, chance, {"a": perfect, "b": perfect})[0] == "saturated"
    assert verdict("accuracy", True, chance, {"a": chance.copy(), "b": chance.copy()})[0] == "chance"
    assert verdict("accuracy", True, chance, {"a": fair, "b": good}) == ("separates", "b")
    assert verdict("accuracy", True, chance, {"a": good, "b": good.copy()})[0] == "ties"
    # lower is better: the smaller error leads, and no error at all for everyone is saturated
    err_chance, err_good, err_bad = np.full(60, 1.0), rng.uniform(0.0, 0.2, 60), rng.uniform(0.5, 1.0, 60)
    assert verdict("mae_gt", False, err_chance, {"a": err_bad, "b": err_good}) == ("separates", "b")
    assert verdict("mae_gt", False, err_chance, {"a": np.zeros(60), "b": np.zeros(60)})[0] == "saturated"


@pytest.mark.slow  # about 30 s of CPU: synth, two extractors, two heads
def test_calibration_table_small(tmp_path: Path) -> None:
    """Scene (30 options) and colour at a small size through the real synth -> cache -> heads path: the table is
    produced, chance is the majority answer's score, and scene is no longer solved perfectly by raw pixels."""
    config = CalibrateConfig(
        out=str(tmp_path / "cal"),
        per_ava=90,
        size=96,
        ava=["scene", "color"],
        vfms=["pixels", "random-vit"],
        workers=1,
        progress=False,
    )
    rows = calibrate(config)
    by = {r.ava: r for r in rows}
    assert set(by) == {"scene", "color"}
    scene = by["scene"]
    assert scene.metric == "accuracy" and scene.n_test >= 15
    assert scene.chance <= 0.1  # 30 balanced classes: the majority answer of train is right at most ~1 in 30
    assert set(scene.scores) == {"pixels", "random-vit"}
    assert scene.scores["pixels"] < 1.0
    assert scene.scores["pixels"] > scene.chance + 0.2  # the layouts are in the colours: pixels are far above chance
    assert by["color"].metric == "ciede2000" and not by["color"].higher_is_better
    for r in rows:
        assert r.verdict in ("saturated", "chance", "separates", "ties")
        assert set(r.heads.values()) <= {"knn", "probe-linear"}
        assert set(r.flat_heads) <= {"knn", "probe-linear"}
    saved = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert [r["ava"] for r in saved["rows"]] == [r.ava for r in rows]
    lines = table_lines(rows)
    assert lines[0].startswith("| ability | metric | chance | pixels | random-vit |") and len(lines) == 2 + len(rows)
    # a second call reuses the dataset (same settings) and gives the same table
    again = calibrate(config)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in rows]


def test_fingerprint_sentences() -> None:
    from ava.synth.calibrate import Row, fingerprint_sentences

    def row(ava: str, verdict: str, leader: str, above: dict[str, bool]) -> Row:
        return Row(
            ava=ava,
            metric="accuracy",
            higher_is_better=True,
            chance=0.1,
            scores={"pixels": 0.5, "random-vit": 0.4},
            heads={"pixels": "knn", "random-vit": "knn"},
            verdict=verdict,
            leader=leader,
            n_test=40,
            above_chance=above,
        )

    rows = [
        row("color", "separates", "pixels", {"pixels": True, "random-vit": True}),
        row("texture", "separates", "random-vit", {"pixels": False, "random-vit": True}),
        row("ocr", "chance", "pixels", {"pixels": False, "random-vit": False}),
        row("scene", "ties", "pixels", {"pixels": True, "random-vit": True}),
    ]
    rows[1].flat_heads = ["probe-linear", "probe-attn"]
    rows[2].flat_heads = ["knn"]  # already said: no VFM beats chance on ocr at all
    first, second, dead, flat = fingerprint_sentences(rows)
    assert first == "`pixels` (raw pixels, the floor): leads on color; does not beat chance on texture and ocr."
    assert second == "`random-vit` (random weights, the control): leads on texture; does not beat chance on ocr."
    assert dead == "Abilities that rank nothing at this size: ocr (no VFM beats chance)."
    assert flat.startswith("Heads that learn nothing at this size")
    assert flat.endswith(": probe-linear and probe-attn on texture.")
    assert fingerprint_sentences([]) == []


def test_unfinished_run_is_named(tmp_path: Path) -> None:
    from ava.errors import AvaError
    from ava.synth.calibrate import runs_by_key

    (tmp_path / "knn-pixels").mkdir()
    with pytest.raises(AvaError, match="knn-pixels: no results_test.json"):
        runs_by_key([tmp_path / "knn-pixels"])
    (tmp_path / "knn-pixels" / "results_test.json").write_text("{not json")
    with pytest.raises(AvaError, match="not a results file"):
        runs_by_key([tmp_path / "knn-pixels"])
