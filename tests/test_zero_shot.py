"""The zero-shot head: no training, each choice question's options ranked by image-text similarity of a tiny RANDOM
CLIP / SigLIP saved with ``save_pretrained``; same run files as every head, so ``ava report`` ranks it; VFMs without
a text tower refused by name; non-choice abilities not applicable (no result, not zero)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import Cli, save_tiny_image_text


@pytest.mark.parametrize("kind", ["clip", "siglip", "tipsv2"])
def test_zero_shot_answers_with_the_most_similar_option(kind: str, choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    from ava.data.format import Dataset
    from ava.vfm.image_text import load_image_text

    ckpt = save_tiny_image_text(tmp_path / kind, kind)
    out = tmp_path / "run"
    key = {"tipsv2": "tipsv2-b"}.get(kind, kind)
    code, text = cli(
        [
            "head",
            "train",
            "--head",
            "zero-shot",
            "--vfm",
            f"tiny-{key}@{ckpt}",
            "--data",
            str(choice_data),
            "--out",
            str(out),
        ],
        one_line=True,
    )
    assert code == 0, text
    run = json.loads((out / "run.json").read_text())
    results = json.loads((out / "results_test.json").read_text())
    assert run["head"] == "zero-shot" and run["random_weights"] is True
    assert set(results["abilities"]) == {"recognition"} and "counting" in run["not_applicable"]
    assert results["abilities"]["recognition"]["n"] == 8 and results["abilities"]["recognition"]["n_unparsed"] == 0
    # the replies are the argmax of cosine similarity, recomputed here from the towers directly
    model = load_image_text(str(ckpt))
    dataset = Dataset(choice_data)
    records = {r["id"]: r for r in map(json.loads, (out / "predictions_test.jsonl").read_text().splitlines())}
    for s in dataset.samples("recognition", split="test"):
        img = model.images([dataset.load_image(s)])[0]
        txt = model.texts([f"a photo of a {o}." for o in s.options])
        assert records[s.id]["prediction"] == s.options[int(np.argmax(txt @ img))]


@pytest.mark.slow
def test_fingerprint_runs_zero_shot_beside_knn_and_report_ranks_it(choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    import ava

    ckpt = save_tiny_image_text(tmp_path / "clip", "clip")
    vfm = f"tiny-clip@{ckpt}"
    ava.extract(vfm=vfm, data=choice_data, cache=tmp_path / "cache")
    code, text = cli(
        [
            "fingerprint",
            "--vfm",
            vfm,
            "--data",
            str(choice_data),
            "--cache",
            str(tmp_path / "cache"),
            "--out",
            str(tmp_path / "runs"),
            "--head",
            "knn,zero-shot",
            "-q",
        ],
        one_line=True,
    )
    assert code == 0, text
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(runs) == 2 and any(r.startswith("zero-shot-") for r in runs)
    report = ava.make_report(sorted((tmp_path / "runs").iterdir()), tmp_path / "report", n_boot=100).data
    assert "zero-shot" in report["heads"] and report["heads"]["zero-shot"]["abilities"] == ["recognition"]
    assert any(set(a["heads"]) == {"knn", "zero-shot"} for a in report["agreement"])


@pytest.mark.parametrize(
    ("vfm", "fragment"),
    [
        ("pixels", "VFM 'pixels' (pixels) has no text tower"),
        ("dinov2", "VFM 'dinov2' (Dinov2Model) has no text tower"),
        ("tiny-clip", "has built-in random weights and no checkpoint, so no text tower"),
        ("clip@VISION", "has no text tower: a CLIP-like checkpoint with both towers is needed"),
    ],
)
def test_vfms_without_a_text_tower_are_refused_by_name(
    vfm: str, fragment: str, choice_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], cli: Cli
) -> None:
    if "VISION" in vfm:
        import transformers as T

        full = save_tiny_image_text(tmp_path / "full", "clip")
        T.CLIPVisionModel.from_pretrained(full).save_pretrained(tmp_path / "vision")
        vfm = vfm.replace("VISION", str(tmp_path / "vision"))
        capsys.readouterr()  # transformers' own load report of the vision-only copy
    code, text = cli(
        [
            "head",
            "train",
            "--head",
            "zero-shot",
            "--vfm",
            vfm,
            "--data",
            str(choice_data),
            "--out",
            str(tmp_path / "run"),
        ],
        one_line=True,
    )
    assert code == 2 and fragment in text and "Traceback" not in text, text
    assert not (tmp_path / "run" / "results_test.json").exists()


def test_only_non_choice_abilities_is_an_error(choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    ckpt = save_tiny_image_text(tmp_path / "clip", "clip")
    code, text = cli(
        [
            "head",
            "train",
            "--head",
            "zero-shot",
            "--vfm",
            f"clip@{ckpt}",
            "--data",
            str(choice_data),
            "--ava",
            "counting",
            "--out",
            str(tmp_path / "run"),
        ],
        one_line=True,
    )
    assert code == 2 and "answers choice questions only" in text


def test_fingerprint_refuses_zero_shot_for_a_vfm_without_text_tower_before_training(
    choice_data: Path, tmp_path: Path, cli: Cli
) -> None:
    code, text = cli(
        [
            "fingerprint",
            "--vfm",
            "pixels",
            "--data",
            str(choice_data),
            "--cache",
            str(tmp_path / "c"),
            "--out",
            str(tmp_path / "runs"),
            "--head",
            "knn,zero-shot",
            "-q",
        ],
        one_line=True,
    )
    assert code == 2 and "VFM 'pixels' (pixels) has no text tower" in text, text
    assert not (tmp_path / "runs").exists()  # the kNN head did not train first


def test_the_progress_advances_per_batch_of_images_within_an_ability(choice_data: Path) -> None:
    """Each batch of images the towers embed advances the bar (it counted abilities: 0/33 for minutes)."""
    from ava.data.format import Dataset
    from ava.heads.zero_shot.train import predict

    class Towers:  # the image-text model's interface, embedding everything alike
        batch_size = 3

        def texts(self, texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), 4), np.float32)

        def images(self, images: list) -> np.ndarray:
            return np.ones((len(images), 4), np.float32)

    dataset = Dataset(choice_data)
    samples = dataset.samples("recognition", split="test")
    steps: list[int] = []
    replies = predict(Towers(), dataset, "recognition", samples, "a photo of a {}.", advance=steps.append)
    images = len({s.image_sha256 for s in samples})
    assert len(replies) == len(samples) and sum(steps) == images
    assert steps == [3] * (images // 3) + ([images % 3] if images % 3 else [])
