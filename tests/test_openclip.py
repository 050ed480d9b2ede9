"""open_clip models in the zero-shot head and the clip@ miner (ava/vfm/openclip.py): a tiny RANDOM open_clip CLIP
(2-layer ViT, 2-layer text transformer) written in open_clip's own local-dir format and loaded back through
``open_clip:local-dir:DIR``, ``open_clip:NAME@FILE`` and ``open_clip:NAME:random``; PE-core's shipped config resolved
and built with random weights. No downloads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ava.data.format import Dataset
from tests.helpers import Cli

open_clip = pytest.importorskip("open_clip")

TINY_NAME = "ava-tiny-openclip"
TINY = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 8},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny config registered with open_clip as ``ava-tiny-openclip`` and a random model of it saved the way
    open_clip's ``save_for_hf`` writes one (its SimpleTokenizer has no files to save: the vocabulary ships with
    open_clip)."""
    import safetensors.torch
    import torch
    from open_clip.push_to_hf_hub import save_config_for_hf

    root = tmp_path_factory.mktemp("tiny-openclip")
    (root / f"{TINY_NAME}.json").write_text(json.dumps(TINY))
    open_clip.add_model_config(root / f"{TINY_NAME}.json")
    torch.manual_seed(1)
    model = open_clip.create_model(TINY_NAME, pretrained=None)
    out = root / "ckpt"
    out.mkdir()
    safetensors.torch.save_file(model.state_dict(), out / "open_clip_model.safetensors")
    save_config_for_hf(model, out / "open_clip_config.json", model_config=TINY)
    return out


def _reference(ckpt: Path, dataset: Dataset, sample, texts: list[str]) -> int:  # type: ignore[no-untyped-def]
    """The option open_clip itself ranks first, computed here from open_clip's API, not ava's wrapper."""
    import torch

    from ava.vfm.preprocess import pad_to_square

    model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{ckpt}")
    tokenizer = open_clip.get_tokenizer(f"local-dir:{ckpt}")
    with torch.no_grad():
        img = model.encode_image(preprocess(pad_to_square(dataset.load_image(sample)))[None], normalize=True)[0]
        txt = model.encode_text(tokenizer(texts), normalize=True)
    return int(torch.argmax(txt @ img))


def test_zero_shot_head_runs_an_open_clip_local_dir(tiny: Path, choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "run"
    vfm = f"open_clip:local-dir:{tiny}"
    code, text = cli(
        ["head", "train", "--head", "zero-shot", "--vfm", vfm, "--data", str(choice_data), "--out", str(out)],
        one_line=True,
    )
    assert code == 0, text
    run = json.loads((out / "run.json").read_text())
    meta = json.loads((out / "zero_shot.json").read_text())
    results = json.loads((out / "results_test.json").read_text())
    # a weights file is not known to be random: only the :random form is labelled so
    assert run["vfm"] == vfm and run["random_weights"] is False
    assert meta["model_type"] == "open_clip:ckpt" and meta["weights"].startswith("sha256:")
    assert meta["logit_scale"] == pytest.approx(1 / 0.07, rel=1e-4)  # open_clip's initial temperature
    assert results["abilities"]["recognition"]["n"] == 8 and results["abilities"]["recognition"]["n_unparsed"] == 0
    dataset = Dataset(choice_data)
    records = {r["id"]: r for r in map(json.loads, (out / "predictions_test.jsonl").read_text().splitlines())}
    samples = dataset.samples("recognition", split="test")
    for s in samples:
        best = _reference(tiny, dataset, s, [f"a photo of a {o}." for o in s.options])
        assert records[s.id]["prediction"] == s.options[best]
    assert len({records[s.id]["prediction"] for s in samples}) > 1  # not one constant reply


def test_named_config_with_a_weights_file_matches_the_local_dir(tiny: Path, tmp_path: Path) -> None:
    import safetensors.torch
    import torch
    from PIL import Image

    from ava.vfm.image_text import load_image_text

    bin_file = tmp_path / "weights.bin"
    torch.save(safetensors.torch.load_file(tiny / "open_clip_model.safetensors"), bin_file)
    images = [Image.new("RGB", (40, 24), (200, 30, 30)), Image.new("RGB", (24, 40), (30, 30, 200))]
    texts = ["a photo of a red.", "a photo of a blue."]
    ref = load_image_text(f"open_clip:local-dir:{tiny}")
    for file in (tiny / "open_clip_model.safetensors", bin_file):
        model = load_image_text(f"open_clip:{TINY_NAME}@{file}")
        np.testing.assert_allclose(model.texts(texts), ref.texts(texts), atol=1e-5)
        np.testing.assert_allclose(model.images(images), ref.images(images), atol=1e-5)
        assert model.random_weights is False and model.model_type == f"open_clip:{TINY_NAME}"
    # a local-dir is identified by the file open_clip loads (its preferred name), not by any other weights file there
    import shutil

    shutil.copytree(tiny, tmp_path / "copy")
    (tmp_path / "copy" / "aaa_other.safetensors").write_bytes(b"not loaded")  # sorts first; open_clip skips it
    assert load_image_text(f"open_clip:local-dir:{tmp_path / 'copy'}").identity == ref.identity
    emb = ref.texts(texts)
    assert emb.shape == (2, 16) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)


def test_random_form_is_seeded_and_labelled_random(tiny: Path, choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    from ava.vfm.image_text import load_image_text

    a, b = (load_image_text(f"open_clip:{TINY_NAME}:random").texts(["a photo of a red."]) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    out = tmp_path / "run"
    code, text = cli(
        [
            "fingerprint",
            "--head",
            "zero-shot",
            "--vfm",
            f"open_clip:{TINY_NAME}:random",
            "--data",
            str(choice_data),
            "--cache",
            str(tmp_path / "unused"),
            "--out",
            str(out),
            "-q",
        ],
        one_line=True,
    )
    assert code == 0, text
    (run_dir,) = [p for p in out.iterdir() if p.name.startswith("zero-shot-")]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["random_weights"] is True and run["vfm_random_weights"] is True
    assert json.loads((run_dir / "zero_shot.json").read_text())["weights"] == f"random:open_clip:{TINY_NAME}:seed0"


def test_clip_miner_takes_an_open_clip_model(tiny: Path, choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "mined"
    miner = f"clip@open_clip:local-dir:{tiny}"
    code, text = cli(
        ["data", "options", "--data", str(choice_data), "--miner", miner, "--out", str(out)], one_line=True
    )
    assert code == 0, text
    samples = Dataset(out).samples("recognition")
    assert len(samples) == 40
    for s in samples:
        assert len(s.options) == 4 and s.truth["text"] in s.options and s.meta["options_miner"] == miner


def test_pe_core_config_resolves_and_builds_with_random_weights() -> None:
    """PE-Core-B-16 (open_clip's config: a timm ``vit_pe_core_base_patch16_224`` image tower, a 24-layer text
    tower) parses, is a known config, and builds on the meta device (shapes only: no memory, no weights)."""
    import torch

    from ava.vfm.openclip import check_model_name, parse

    source = parse("open_clip:PE-Core-B-16:random")
    check_model_name(source)
    assert source.model_id == "PE-Core-B-16" and source.random_weights
    cfg = open_clip.get_model_config("PE-Core-B-16")
    assert cfg["vision_cfg"]["timm_model_name"] == "vit_pe_core_base_patch16_224" and cfg["embed_dim"] == 1024
    with torch.device("meta"):
        model = open_clip.create_model("PE-Core-B-16", pretrained=None, device="meta")
    assert type(model).__name__ == "CustomTextCLIP" and type(model.visual.trunk).__name__ == "Eva"  # timm's PE
    assert tuple(model.text.text_projection.shape) == (1024, 1024)
    assert 500e6 > sum(p.numel() for p in model.parameters()) > 400e6  # 448M


@pytest.mark.slow
def test_pe_core_random_runs_through_the_route_on_cpu() -> None:
    """The whole PE-Core-B-16 (448M parameters, random weights) through ava's loader on CPU: about 20 s on 2 cores,
    so marked slow. Its open_clip transform takes the image to 224 px and its tokenizer to 32 tokens."""
    from PIL import Image

    from ava.vfm.image_text import load_image_text

    model = load_image_text("open_clip:PE-Core-B-16:random")
    assert model.random_weights and model.identity == "random:open_clip:PE-Core-B-16:seed0"
    img = model.images([Image.new("RGB", (60, 30), (200, 30, 30))])
    txt = model.texts(["a photo of a red.", "a photo of a blue."])
    assert img.shape == (1, 1024) and txt.shape == (2, 1024) and np.isfinite(txt @ img[0]).all()
    assert model.tokenizer(["a"]).shape == (1, 32)


@pytest.mark.parametrize(
    ("vfm", "fragment"),
    [
        ("open_clip:", "nothing after 'open_clip:'"),
        ("open_clip:local-dir:MISSING", "directory MISSING does not exist"),
        ("open_clip:local-dir:NOCONFIG", "has no open_clip_config.json"),
        ("open_clip:local-dir:NOWEIGHTS", "holds open_clip_config.json but no weights file"),
        ("open_clip:PE-Core-B-16", "names no weights; use open_clip:PE-Core-B-16@WEIGHTS_FILE"),
        ("open_clip:PE-Core-B-16@MISSING/w.safetensors", "weights file MISSING/w.safetensors does not exist"),
        ("open_clip:PE-Core-B-61:random", "open_clip has no model config 'PE-Core-B-61'; did you mean PE-Core-B-16"),
        ("open_clip:hf-hub:timm/PE-Core-B-16", "ava does not download open_clip checkpoints"),
        ("open_clip:PE-Core-T-16-384@TINY", "open_clip could not load it (AssertionError: text pos_embed width"),
    ],
)
def test_bad_open_clip_names_are_one_line(
    vfm: str, fragment: str, tiny: Path, choice_data: Path, tmp_path: Path, cli: Cli
) -> None:
    (tmp_path / "NOCONFIG").mkdir()
    (tmp_path / "NOWEIGHTS").mkdir()
    (tmp_path / "NOWEIGHTS" / "open_clip_config.json").write_text((tiny / "open_clip_config.json").read_text())
    vfm = vfm.replace("MISSING", str(tmp_path / "MISSING")).replace("NOCONFIG", str(tmp_path / "NOCONFIG"))
    vfm = vfm.replace("NOWEIGHTS", str(tmp_path / "NOWEIGHTS")).replace(
        "TINY", str(tiny / "open_clip_model.safetensors")
    )
    fragment = fragment.replace("MISSING", str(tmp_path / "MISSING")).replace("NOCONFIG", str(tmp_path / "NOCONFIG"))
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


def test_cache_extract_refuses_an_open_clip_name(choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    code, text = cli(
        [
            "cache",
            "extract",
            "--vfm",
            "open_clip:PE-Core-B-16:random",
            "--data",
            str(choice_data),
            "--cache",
            str(tmp_path / "c"),
        ],
        one_line=True,
    )
    assert code == 2 and "open_clip models serve the zero-shot head and the clip@ miner only" in text, text


def test_fingerprint_refuses_feature_heads_for_an_open_clip_name(
    tiny: Path, choice_data: Path, tmp_path: Path, cli: Cli
) -> None:
    vfm = f"open_clip:local-dir:{tiny}"
    args = ["--data", str(choice_data), "--cache", str(tmp_path / "c"), "--out", str(tmp_path / "fp"), "-q"]
    code, text = cli(["fingerprint", "--head", "knn,zero-shot", "--vfm", vfm, *args], one_line=True)
    assert code == 2 and "open_clip models serve the zero-shot head and the clip@ miner only" in text, text
    assert not (tmp_path / "fp").exists()
