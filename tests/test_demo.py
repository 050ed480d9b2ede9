"""A reduced `ava demo` end to end through the CLI: synthetic data, both built-in extractors, kNN + linear probe,
a tiny random LLM head on one ability, the report; then a re-run that skips every finished stage."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ava.cli.main import app
from ava.demo import FULL, QUICK, DemoConfig

ABILITIES = ["color", "counting", "spatial"]


def _timm_importable() -> bool:
    try:
        import timm  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


def test_demo_runs_size_free_extractors_at_the_images_size():
    from ava.demo import demo_vfms

    assert demo_vfms(["pixels", "random-vit", "effnet-lite0"], 160) == [
        "pixels#size=160",
        "random-vit",
        "effnet-lite0#size=160",
    ]  # random-vit's position table fixes 224 px
    assert demo_vfms(["pixels", "effnet-lite0"], 100) == ["pixels", "effnet-lite0"]  # not a multiple of 16: 224
    assert demo_vfms(["pixels"], 224) == ["pixels"]  # already its size: the plain name (and the same cache)


def test_presets_fill_only_unset_fields():
    cfg = DemoConfig(per_ava=7).resolved()
    assert cfg.per_ava == 7 and cfg.size == FULL["size"] and cfg.heads == FULL["heads"]
    quick = DemoConfig(quick=True).resolved()
    assert quick.per_ava == QUICK["per_ava"] and "probe-attn" not in quick.heads


@pytest.mark.slow
def test_reduced_demo(tmp_path):
    out = tmp_path / "demo"
    args = [
        "demo",
        "--out",
        str(out),
        "--per-ava",
        "30",
        "--size",
        "96",
        "--device",
        "cpu",
        *(x for a in ABILITIES for x in ("--ava", a)),
        "--head",
        "knn",
        "--head",
        "probe-linear",
        "--llm-ava",
        "color",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    for sub in ("data/dataset.json", "report/report.md", "report/report.json", "report/plots/knn-ranks.png"):
        assert (out / sub).is_file(), sub
    report = json.loads((out / "report" / "report.json").read_text())
    heads = set(report["heads"])
    assert {"knn", "probe-linear"} <= heads
    assert any(h.startswith("llm") for h in heads), heads
    knn = report["heads"]["knn"]
    # pixels and effnet-lite0 run at the images' 96 px (in their names); effnet-lite0 is left out without timm
    trained = {"effnet-lite0#size=96"} if _timm_importable() else set()
    assert set(knn["vfms"]) == {"pixels#size=96", "random-vit", *trained}
    assert set(knn["abilities"]) == set(ABILITIES)
    assert knn["random_weights"] == {"pixels#size=96": False, "random-vit": True, **{v: False for v in trained}}
    assert knn["synthetic"] is True
    md = (out / "report" / "report.md").read_text()
    assert "random-vit (random weights)" in md and "data: synthetic" in md
    assert "### knn vs probe-linear" in md
    # the report opens with one sentence per extractor on what its fingerprint shows
    assert md.startswith("# AVA-Bench report\n\n**Contents**\n\n- [What the fingerprints show](#what-the-")
    assert "\n## What the fingerprints show\n" in md
    assert report["opening"][0].startswith("`pixels#size=96` (raw pixels, the floor): leads on ")
    assert report["opening"][1].startswith("`random-vit` (random weights, the control): leads on ")
    assert "## Extractors of this demo" in md and "`random-vit`: RANDOM weights" in md
    assert "`random-vit`: RANDOM weights: the control, not a trained model; input 224 px" in md
    if trained:
        assert "`effnet-lite0#size=96`: REAL trained weights: EfficientNet-Lite0, a CNN trained on ImageNet" in md
        assert "(not one of the paper's VFMs); input 96 px" in md
    else:
        assert "effnet-lite0 left out" in result.output
    assert "report.md" in result.output

    # the second run resumes: every head run is skipped and the report is rebuilt
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert again.output.count("already done, skipped") == 3 * (2 + len(trained))  # knn, probe-linear, llm per VFM
    assert "reusing" in again.output


def test_a_run_counts_as_done_only_with_its_own_config(tmp_path):
    from ava.demo import DONE, _config_json, _finished
    from ava.heads.knn.config import KNNConfig

    run = tmp_path / "knn-pixels"
    run.mkdir()
    cfg = KNNConfig(ava=["color"], vfm="pixels", out=str(run))
    (run / "results_test.json").write_text("{}")
    assert not _finished(run, cfg)  # results without the demo's marker: an interrupted or foreign run
    (run / DONE).write_text(json.dumps(_config_json(KNNConfig(ava=["color"], vfm="pixels", out=str(run), k=1))))
    assert not _finished(run, cfg)  # finished, but with other settings
    (run / DONE).write_text(json.dumps(_config_json(cfg)))
    assert _finished(run, cfg)
    (run / "results_test.json").unlink()
    assert not _finished(run, cfg)


@pytest.mark.slow
def test_llm_head_only_on_the_abilities_the_demo_runs(tmp_path):
    """The default LLM abilities (color, spatial) are not in --ava Counting: no LLM stage, not an LLM on counting."""
    from ava.demo import run_demo

    out = tmp_path / "demo"
    run_demo(
        DemoConfig(
            out=str(out),
            per_ava=20,
            size=64,
            ava=["Counting"],
            vfms=["pixels"],
            heads=["knn"],
            device="cpu",
            progress=False,
        )
    )
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["knn-pixels_size_64"]  # pixels at the images' size
    report = json.loads((out / "report" / "report.json").read_text())
    assert set(report["heads"]) == {"knn"} and report["heads"]["knn"]["abilities"] == ["counting"]


def _synthesized(data, **settings) -> None:
    """A dataset.json as `ava data synth` writes it (the images are not needed by the settings check)."""
    from ava.synth import SynthConfig
    from ava.synth.generate import resolve_abilities, synth_info

    synth = SynthConfig(out=str(data), **settings)
    data.mkdir(parents=True)
    (data / "dataset.json").write_text(json.dumps(synth_info(synth, resolve_abilities(synth.ava))))


@pytest.mark.parametrize(
    ("made", "now", "said"),
    [
        ({}, {}, None),  # every ability (no --ava): the 14 the suite generates, not every registered one (ta_*)
        ({"ava": ["color", "ocr"]}, {"ava": ["OCR", "Color"]}, None),  # aliases and order do not matter
        ({"size": 96}, {"size": 160}, "--size 96 there, 160 now"),
        ({"per_ava": 30}, {"per_ava": 200}, "--per-ava 30 there, 200 now"),
        ({"seed": 1}, {}, "--seed 1 there, 0 now"),
        ({"ava": ["color"]}, {}, "--ava color there, abs_depth,action,"),
    ],
)
def test_a_second_demo_reuses_its_data_or_names_the_setting_that_differs(tmp_path, made, now, said):
    from rich.console import Console

    from ava.demo import _synth
    from ava.errors import AvaError

    base = {"per_ava": 30, "size": 96, "seed": 0}
    _synthesized(tmp_path / "data", **{**base, **made})
    config = DemoConfig(out=str(tmp_path), **{**base, **now})
    console = Console(record=True, width=200)
    if said is None:
        _synth(config, tmp_path / "data", console)
        assert "reusing" in console.export_text()
    else:
        with pytest.raises(AvaError, match="was made with other settings") as e:
            _synth(config, tmp_path / "data", console)
        assert said in str(e.value) and "another --out" in str(e.value)
