"""``ava data options``: hard-negative miners (cache centroids, text tower), the rewrite of questions, answers and
provenance, the FOCI template, and the bad inputs (each one line, nothing written). Tiny checkpoints are RANDOM."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _foci_fixtures import make_choice_data, save_tiny_image_text
from _foci_fixtures import run_main as _run

from ava.abilities import get_ability
from ava.abilities.parsers import extract_options
from ava.cli.main import main
from ava.data.format import Dataset
from ava.data.truth import derive_truth


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_choice_data(tmp_path_factory.mktemp("choice") / "d")


@pytest.fixture(scope="module")
def cache(data: Path) -> Path:
    import ava

    root = data.parent / "cache"
    ava.extract(vfm="pixels#size=32", data=data, cache=root)
    return root


def _consistent(sample, k: int) -> None:
    """Options hold the truth and k classes, the question lists exactly them, the answer reads back as the truth."""
    ability = get_ability(sample.ava)
    assert len(sample.options) == k == len(set(sample.options))
    assert sample.options[sample.truth["index"]] == sample.truth["text"]
    assert extract_options(sample.question)[0] == sample.options
    derived = derive_truth(ability, sample.question, sample.answer)
    assert derived.truth["index"] == sample.truth["index"]


def test_cache_miner_offers_the_classes_nearest_to_each_image(data: Path, cache: Path, tmp_path: Path) -> None:
    from ava.cache import open_cache
    from ava.heads.features import read_pooled_views

    out = tmp_path / "hard"
    code = main_ok(["data", "options", "--data", str(data), "--miner", "cache:pixels#size=32", "--cache", str(cache),
                    "--k", "4", "--out", str(out)])  # fmt: skip
    assert code == 0
    before, after = Dataset(data), Dataset(out)
    samples = after.samples("recognition")
    for s in samples:
        _consistent(s, 4)
    assert after.samples("counting") == before.samples("counting")  # not a choice: untouched
    # the same ranking computed here with numpy: centroids of normalized train features, cosine per image
    feats = open_cache(cache, "pixels#size=32")
    x = read_pooled_views(feats, samples, [None], ["mean"])["mean"]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    classes = list(dict.fromkeys(s.truth["text"] for s in samples))
    cent = np.stack([x[[i for i, s in enumerate(samples) if s.split == "train" and s.truth["text"] == c]].mean(0)
                     for c in classes])  # fmt: skip
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


def test_random_options_depend_on_the_seed_only(data: Path, tmp_path: Path) -> None:
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        assert main_ok(["data", "options", "--data", str(data), "--k", "3", "--seed", str(seed), "--out",
                        str(tmp_path / name)]) == 0  # fmt: skip
    text = {n: (tmp_path / n / "samples" / "recognition.jsonl").read_text() for n in "abc"}
    assert text["a"] == text["b"] != text["c"]
    for s in Dataset(tmp_path / "a").samples("recognition"):
        _consistent(s, 3)


def test_foci_template_asks_for_the_letter_and_scores_with_the_existing_parsers(data: Path, tmp_path: Path) -> None:
    import ava

    out = tmp_path / "foci"
    assert main_ok(["data", "options", "--data", str(data), "--template", "foci", "--domain", "colours",
                    "--out", str(out)]) == 0  # fmt: skip
    samples = Dataset(out).samples("recognition", split="test")
    s = samples[0]
    assert s.question.startswith("Which of these colours is shown in the image?\nChoices:\nA. ")
    assert s.question.endswith("\nAnswer with the letter from the given choices directly.")
    assert s.answer == "ABCD"[s.truth["index"]]
    _consistent(s, 4)
    # a reply that begins with the right letter is right; another letter is wrong
    pred = tmp_path / "pred.jsonl"
    lines = [{"ava": x.ava, "id": x.id, "prediction": f"{'ABCD'[x.truth['index']]}. {x.truth['text']}"}
             for x in samples]  # fmt: skip
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
    for reply, ok in [(f"{right} is the answer", True), (f"({right})", True), (f" {right}", True),
                      (f"The answer is {right}", False), (f"{right}ird", False), ("E", False)]:  # fmt: skip
        assert score_sample(get_ability("recognition"), s, reply).value == (1.0 if ok else 0.0), reply


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_text_tower_miner_runs_on_tiny_random_checkpoints(kind: str, data: Path, tmp_path: Path) -> None:
    ckpt = save_tiny_image_text(tmp_path / kind, kind)
    out = tmp_path / "mined"
    assert main_ok(["data", "options", "--data", str(data), "--miner", f"clip@{ckpt}", "--out", str(out)]) == 0
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
def test_bad_inputs_are_one_line_and_write_nothing(args: list[str], fragment: str, data: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    if "clip@VISION" in args:
        args = [a.replace("VISION", str(_vision_only(tmp_path))) for a in args]
        capsys.readouterr()  # transformers' own load report of the vision-only copy
    out = tmp_path / "out"
    code, message = _run(["data", "options", "--data", str(data), "--out", str(out), *args], capsys)
    assert code == 2 and fragment in message and "Traceback" not in message, message
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_an_existing_out_is_kept_without_force(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    code, message = _run(["data", "options", "--data", str(data), "--out", str(out)], capsys)
    assert code == 2 and "pass --force" in message
    code, message = _run(["data", "options", "--data", str(data), "--out", str(out), "--force"], capsys)
    assert code == 2 and "not an ava dataset" in message and (out / "mine.txt").read_text() == "keep me"


def test_an_unreachable_clip_checkpoint_names_the_miners_own_local_form(data: Path, tmp_path: Path, capsys,
                                                                        monkeypatch) -> None:  # fmt: skip
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty Hugging Face cache
    out = tmp_path / "out"
    code, message = _run(["data", "options", "--data", str(data), "--out", str(out), "--miner",
                          "clip@openai/clip-vit-base-patch32"], capsys)  # fmt: skip
    assert code == 2 and "point ava at the directory: '--miner clip@/path/to/dir'" in message, message
    assert "--vfm" not in message and not out.exists()
