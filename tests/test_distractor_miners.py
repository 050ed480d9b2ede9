"""``ava data options``: hard-negative miners (cache centroids, text tower), the rewrite of questions, answers and
provenance, the FOCI template, and the bad inputs (each one line, nothing written). Tiny checkpoints are RANDOM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ava.abilities import get_ability
from ava.abilities.parsers import extract_options
from ava.cli.main import main
from ava.data.format import Dataset
from ava.data.truth import derive_truth
from tests.helpers import Cli, make_photo_choice_data, save_tiny_image_text


@pytest.fixture(scope="module")
def cache(choice_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import ava

    root = tmp_path_factory.mktemp("choice-cache") / "cache"
    ava.extract(vfm="pixels#size=32", data=choice_data, cache=root)
    return root


def _consistent(sample, k: int) -> None:
    """Options hold the truth and k classes, the question lists exactly them, the answer reads back as the truth."""
    ability = get_ability(sample.ava)
    assert len(sample.options) == k == len(set(sample.options))
    assert sample.options[sample.truth["index"]] == sample.truth["text"]
    assert extract_options(sample.question)[0] == sample.options
    derived = derive_truth(ability, sample.question, sample.answer)
    assert derived.truth["index"] == sample.truth["index"]


def test_cache_miner_offers_the_classes_nearest_to_each_image(choice_data: Path, cache: Path, tmp_path: Path) -> None:
    from ava.cache import open_cache
    from ava.heads.features import read_pooled_views

    out = tmp_path / "hard"
    code = main_ok(
        [
            "data",
            "options",
            "--data",
            str(choice_data),
            "--miner",
            "cache:pixels#size=32",
            "--cache",
            str(cache),
            "--k",
            "4",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    before, after = Dataset(choice_data), Dataset(out)
    samples = after.samples("recognition")
    for s in samples:
        _consistent(s, 4)
    assert after.samples("counting") == before.samples("counting")  # not a choice: untouched
    # the same ranking computed here with numpy: prototypes of normalized features (every split: a class is offered
    # whichever split its questions are in), cosine per image (no object box here: the whole image)
    feats = open_cache(cache, "pixels#size=32")
    x = read_pooled_views(feats, samples, [None], ["mean"])["mean"]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    classes = list(dict.fromkeys(s.truth["text"] for s in samples))
    cent = np.stack([x[[i for i, s in enumerate(samples) if s.truth["text"] == c]].mean(0) for c in classes])
    cent /= np.linalg.norm(cent, axis=1, keepdims=True)
    for i, s in enumerate(samples):
        order = [classes[j] for j in np.argsort(-(cent @ x[i])) if classes[j] != s.truth["text"]]
        assert set(s.options) - {s.truth["text"]} == set(order[:3]), s.id
    info = json.loads((out / "dataset.json").read_text())["options"]
    assert info["miner"] == "cache:pixels#size=32" and info["k"] == 4 and info["abilities"] == {"recognition": 40}
    assert all(s.meta["options_miner"] == "cache:pixels#size=32" for s in samples)
    assert Dataset(out).load_image(samples[0]).size == (40, 40)  # images came along


def main_ok(args: list[str]) -> int:
    try:
        main(args)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_random_options_depend_on_the_seed_only(choice_data: Path, tmp_path: Path) -> None:
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        assert (
            main_ok(
                [
                    "data",
                    "options",
                    "--data",
                    str(choice_data),
                    "--k",
                    "3",
                    "--seed",
                    str(seed),
                    "--out",
                    str(tmp_path / name),
                ]
            )
            == 0
        )
    text = {n: (tmp_path / n / "samples" / "recognition.jsonl").read_text() for n in "abc"}
    assert text["a"] == text["b"] != text["c"]
    for s in Dataset(tmp_path / "a").samples("recognition"):
        _consistent(s, 3)


def test_foci_template_asks_for_the_letter_and_scores_with_the_existing_parsers(
    choice_data: Path, tmp_path: Path
) -> None:
    import ava

    out = tmp_path / "foci"
    assert (
        main_ok(
            [
                "data",
                "options",
                "--data",
                str(choice_data),
                "--template",
                "foci",
                "--domain",
                "colours",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    samples = Dataset(out).samples("recognition", split="test")
    s = samples[0]
    assert s.question.startswith("Which of these colours is shown in the image?\nChoices:\nA. ")
    assert s.question.endswith("\nAnswer with the letter from the given choices directly.")
    assert s.answer == "ABCD"[s.truth["index"]]
    _consistent(s, 4)
    # a reply that begins with the right letter is right; another letter is wrong
    pred = tmp_path / "pred.jsonl"
    lines = [
        {"ava": x.ava, "id": x.id, "prediction": f"{'ABCD'[x.truth['index']]}. {x.truth['text']}"} for x in samples
    ]
    lines[0]["prediction"] = "ABCD"[(s.truth["index"] + 1) % 4]
    pred.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = ava.score(out, pred, ava="recognition", out=tmp_path / "scored")
    assert result.scores["recognition"] == pytest.approx((len(samples) - 1) / len(samples))
    from ava.abilities import get_ability
    from ava.metrics.scoring import score_sample

    # FOCI's own rule: "B is the answer" begins with B (the general parsers read no option in it); a reply that
    # begins with a word, or names the option only later, is not a choice
    assert all(x.meta["reply_rule"] == "foci" for x in samples)
    right = "ABCD"[s.truth["index"]]
    for reply, ok in [
        (f"{right} is the answer", True),
        (f"({right})", True),
        (f" {right}", True),
        (f"The answer is {right}", False),
        (f"{right}ird", False),
        ("E", False),
    ]:
        assert score_sample(get_ability("recognition"), s, reply).value == (1.0 if ok else 0.0), reply


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_text_tower_miner_runs_on_tiny_random_checkpoints(kind: str, choice_data: Path, tmp_path: Path) -> None:
    ckpt = save_tiny_image_text(tmp_path / kind, kind)
    out = tmp_path / "mined"
    assert main_ok(["data", "options", "--data", str(choice_data), "--miner", f"clip@{ckpt}", "--out", str(out)]) == 0
    for s in Dataset(out).samples("recognition"):
        _consistent(s, 4)
        assert s.meta["options_miner"] == f"clip@{ckpt}"


def _vision_only(tmp_path: Path) -> Path:
    import transformers as T

    full = save_tiny_image_text(tmp_path / "full", "clip")
    T.CLIPVisionModel.from_pretrained(full).save_pretrained(tmp_path / "vision")
    return tmp_path / "vision"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--k", "9"], "no choice ability of"),
        (["--k", "9", "--ava", "recognition"], "k = 9 options asked, but ability 'recognition' has only 8 classes"),
        (["--ava", "counting"], "has no choice questions to rewrite"),
        (["--miner", "cache:pixels"], "--miner cache:pixels reads a feature cache: give it with --cache"),
        (["--miner", "nearest"], "unknown miner 'nearest'"),
        (["--miner", "clip@VISION"], "has no text tower"),
        (["--template", "mmlu"], "unknown question template 'mmlu'"),
    ],
)
def test_bad_inputs_are_one_line_and_write_nothing(
    args: list[str], fragment: str, choice_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], cli: Cli
) -> None:
    if "clip@VISION" in args:
        args = [a.replace("VISION", str(_vision_only(tmp_path))) for a in args]
        capsys.readouterr()  # transformers' own load report of the vision-only copy
    out = tmp_path / "out"
    code, message = cli(["data", "options", "--data", str(choice_data), "--out", str(out), *args], one_line=True)
    assert code == 2 and fragment in message and "Traceback" not in message, message
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_an_existing_out_is_kept_without_force(choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    code, message = cli(["data", "options", "--data", str(choice_data), "--out", str(out)], one_line=True)
    assert code == 2 and "pass --force" in message
    code, message = cli(["data", "options", "--data", str(choice_data), "--out", str(out), "--force"], one_line=True)
    assert code == 2 and "not an ava dataset" in message and (out / "mine.txt").read_text() == "keep me"


# -- distractors per object: the tokens under the question's box, every class of the dataset ------------------------


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import ava

    root = tmp_path_factory.mktemp("photos")
    for name, boxes in (("boxed", True), ("whole", False)):
        make_photo_choice_data(root / name, boxes=boxes)
        ava.extract(vfm="pixels#size=64", data=root / name, cache=root / "cache")
    return root


def _options(root: Path, data: str, miner: str, out: Path, *extra: str) -> tuple[Dataset, dict]:
    args = ["data", "options", "--data", str(root / data), "--miner", miner, "--out", str(out), *extra]
    if miner.startswith("cache:"):
        args += ["--cache", str(root / "cache")]
    assert main_ok(args) == 0
    return Dataset(out), json.loads((out / "dataset.json").read_text())["options"]


def test_the_cache_miner_reads_the_tokens_under_each_objects_box(photos: Path, tmp_path: Path) -> None:
    """Each question's distractors are the classes whose prototypes are nearest the mean of the tokens of the
    4 x 4 grid cells its object fills (the 64 x 32 photo padded to 64 x 64: the left object is cells rows 1-2, cols
    0-1), computed here from the tokens; prototypes from every split, so a class whose objects are all in test
    (cyan) is offered too."""
    from ava.cache import open_cache

    ds, info = _options(photos, "boxed", "cache:pixels#size=64", tmp_path / "hard")
    samples = ds.samples("recognition")
    tokens = open_cache(photos / "cache", "pixels#size=64").read([s.image_sha256 for s in samples])
    grid = tokens.reshape(len(samples), 4, 4, -1)
    left = [s.id.endswith("-0") for s in samples]
    x = np.stack(
        [
            grid[i, 1:3, 0:2].mean((0, 1)) if is_left else grid[i, 1:3, 2:4].mean((0, 1))
            for i, is_left in enumerate(left)
        ]
    )
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    classes = sorted({s.truth["text"] for s in samples})
    cent = np.stack([x[[i for i, s in enumerate(samples) if s.truth["text"] == c]].mean(0) for c in classes])
    cent /= np.linalg.norm(cent, axis=1, keepdims=True)
    for i, s in enumerate(samples):
        _consistent(s, 4)
        order = [classes[j] for j in np.argsort(-(cent @ x[i])) if classes[j] != s.truth["text"]]
        assert set(s.options) - {s.truth["text"]} == set(order[:3]), s.id
    assert {s.truth["text"] for s in samples if s.split == "train"} == set(classes) - {"cyan"}
    assert any("cyan" in s.options and s.truth["text"] != "cyan" for s in samples)  # offered, though only in test
    assert info["unplaced"] == {}


def test_distractors_are_the_objects_kind_not_the_photos_other_objects(
    photos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The share of distractors that are the other object of the question's photo: the cache miner reading the
    object stays within 10 points of random options; reading the whole photo (the same data without boxes) it
    offers the photo's other object far more often. The command says the share."""
    shares = {}
    for name, data, miner in (
        ("object", "boxed", "cache:pixels#size=64"),
        ("photo", "whole", "cache:pixels#size=64"),
        ("random", "boxed", "random"),
    ):
        _, info = _options(photos, data, miner, tmp_path / name)
        shares[name] = info["same_photo"]["recognition"]["share"]
        assert info["same_photo"]["recognition"]["questions"] == 80
    assert shares["object"] <= shares["random"] + 0.10, shares
    assert shares["photo"] >= shares["object"] + 0.15, shares
    out = capsys.readouterr().out
    assert f"{shares['random']:.0%} of the distractors are other objects of the question's photo (over 80" in out


def test_declared_classes_no_object_shows_are_ranked_last_and_said(
    photos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A class the build declares (build.classes) that no question has as its answer cannot be placed in the
    VFM's space: it follows every placed class, so it is offered only where the placed ones are too few."""
    data = tmp_path / "declared"
    shutil.copytree(photos / "boxed", data)
    info_path = data / "dataset.json"
    info = json.loads(info_path.read_text())
    info["build"]["classes"]["recognition"] += ["teal", "navy"]
    info_path.write_text(json.dumps(info))
    root = tmp_path
    (root / "cache").symlink_to(photos / "cache")
    ds, opts = _options(root, "declared", "cache:pixels#size=64", tmp_path / "k4")
    assert opts["unplaced"] == {"recognition": ["teal", "navy"]}
    assert not any({"teal", "navy"} & set(s.options) for s in ds.samples("recognition"))
    assert "recognition: 2 classes no object shows, ranked last: teal, navy" in capsys.readouterr().out
    # 9 options of 10 classes: the 8 placed ones, then the first unplaced one
    ds, _ = _options(root, "declared", "cache:pixels#size=64", tmp_path / "k9", "--k", "9")
    assert all("teal" in s.options and "navy" not in s.options for s in ds.samples("recognition"))


@pytest.mark.parametrize(
    ("box", "size", "mode", "cells"),
    [
        ((0.0, 0.0, 0.5, 0.5), (64, 64), "pad", {0: 0.25, 1: 0.25, 4: 0.25, 5: 0.25}),  # 4 cells, equally
        ((0.0, 0.0, 0.5, 1.0), (64, 32), "pad", {4: 0.25, 5: 0.25, 8: 0.25, 9: 0.25}),  # padded: rows 1-2
        ((0.1, 0.1, 0.12, 0.12), (64, 64), "pad", {0: 1.0}),  # smaller than a cell: that cell
        ((0.0, 0.0, 0.375, 0.25), (64, 64), "pad", {0: 1 / 1.5, 1: 0.5 / 1.5}),  # half of cell 1 covered
        ((0.25, 0.0, 0.5, 1.0), (128, 64), "processor", {i: 0.125 for i in (0, 1, 4, 5, 8, 9, 12, 13)}),  # crop
        ((0.0, 0.0, 0.1, 0.1), (128, 64), "processor", {0: 1.0}),  # cut off by the crop: the nearest cell
    ],
)
def test_box_weights_are_the_share_of_the_box_each_cell_holds(box, size, mode, cells) -> None:
    from ava.distractors.miners import box_weights

    w = box_weights(box, (4, 4), size, mode)
    assert w.sum() == pytest.approx(1.0)
    assert {i: round(float(v), 4) for i, v in enumerate(w) if v > 0} == {i: round(v, 4) for i, v in cells.items()}


def test_the_text_tower_sees_the_object_not_the_photo(photos: Path) -> None:
    from ava.distractors.miners import _object_picture

    ds = Dataset(photos / "boxed")
    s = ds.samples("recognition")[0]
    crop = _object_picture(ds, s)
    assert crop.size == (32, 32)
    assert np.array_equal(np.asarray(crop), np.asarray(ds.load_image(s))[:, :32])
    whole = Dataset(photos / "whole").samples("recognition")[0]
    assert _object_picture(Dataset(photos / "whole"), whole).size == (64, 32)


def test_an_unreachable_clip_checkpoint_names_the_miners_own_local_form(
    choice_data: Path, tmp_path: Path, monkeypatch, cli: Cli
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty Hugging Face cache
    out = tmp_path / "out"
    code, message = cli(
        [
            "data",
            "options",
            "--data",
            str(choice_data),
            "--out",
            str(out),
            "--miner",
            "clip@openai/clip-vit-base-patch32",
        ],
        one_line=True,
    )
    assert code == 2 and "point ava at the directory: '--miner clip@/path/to/dir'" in message, message
    assert "--vfm" not in message and not out.exists()
