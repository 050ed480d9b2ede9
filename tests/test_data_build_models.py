"""`ava data build --depth-model` and `--miner`: models run at build time. Every checkpoint here is a tiny RANDOM one
(Depth Anything, CLIP) saved with ``save_pretrained`` and loaded back through the path a real checkpoint takes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ava.cli.main import main
from ava.curate import BuildConfig, build_dataset
from ava.curate import depth_model as dm
from ava.curate.mining import BuildMiner
from ava.curate.sources import read_coco
from ava.curate.synthetic import write_sources
from ava.data.format import Dataset
from tests.helpers import save_tiny_image_text


def save_tiny_depth_anything(path: Path, kind: str = "relative", seed: int = 0) -> Path:
    """A 2-layer, 32-wide Depth Anything (RANDOM weights, marked so in its config) and its image processor."""
    import torch
    import transformers as T

    torch.manual_seed(seed)
    backbone = T.Dinov2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=28,
        patch_size=14,
        out_features=["stage1", "stage2"],
        reshape_hidden_states=False,
    )
    config = T.DepthAnythingConfig(
        backbone_config=backbone,
        reassemble_hidden_size=32,
        neck_hidden_sizes=[16, 32],
        fusion_hidden_size=16,
        reassemble_factors=[1, 0.5],
        head_hidden_size=8,
        patch_size=14,
        depth_estimation_type=kind,
        max_depth=30,
    )
    config.random_weights = True
    T.DepthAnythingForDepthEstimation(config).save_pretrained(path)
    T.DPTImageProcessor(
        size={"height": 28, "width": 28}, keep_aspect_ratio=True, ensure_multiple_of=14
    ).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    write_sources(root / "src", n_images=16, seed=0)
    save_tiny_depth_anything(root / "relative", "relative")
    save_tiny_depth_anything(root / "metric", "metric")
    save_tiny_image_text(root / "clip", "clip")
    return root


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    return int(exc.value.code or 0), " ".join((captured.out + captured.err).split())


def _coco(src: Path, out: Path, **kw: object) -> BuildConfig:
    return BuildConfig(out=out, coco=src / "src" / "instances.json", images=src / "src" / "images", **kw)  # type: ignore[arg-type]


def test_metric_or_relative_comes_from_the_config(src: Path) -> None:
    assert dm.load(str(src / "metric"))[2]["metric"] is True
    assert dm.load(str(src / "relative"))[2]["metric"] is False


def test_maps_are_the_models_prediction_at_image_size_relative_inverted(src: Path, tmp_path: Path) -> None:
    import torch

    coco = read_coco(src / "src" / "instances.json", src / "src" / "images")
    images = list(coco.images.values())[:3]
    depth, prov = dm.run(str(src / "relative"), images, tmp_path)
    model, processor, _ = dm.load(str(src / "relative"))
    for im in images:
        stored = depth.load(im)
        assert stored.shape == (im.height, im.width)
        from ava.curate.sources import load_rgb

        image = load_rgb(im.path)
        with torch.no_grad():
            out = model(**processor(images=[image], return_tensors="pt"))
        disparity = processor.post_process_depth_estimation(out, target_sizes=[(im.height, im.width)])[0]
        disparity = disparity["predicted_depth"].numpy()
        ok = disparity > 0
        np.testing.assert_allclose(stored[ok], 1.0 / disparity[ok], rtol=1e-5)  # larger disparity: nearer
        assert np.isnan(stored[~ok]).all()
    assert prov["random_weights"] is True and prov["images"] == 3


def test_relative_model_builds_nearer_farther_only_and_is_recorded(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the model's maps go while the build runs
    out = tmp_path / "out"
    result = build_dataset(
        _coco(src, out, depth_model=str(src / "relative"), ava=["rel_depth"], tasks=["ta_nearer_object"])
    )
    record = json.loads((out / "dataset.json").read_text())["build"]["sources"]["depth"]
    assert record["model"] == str(src / "relative") and record["metric"] is False and record["random_weights"]
    assert record["sha256"] == dm.weights_digest(src / "relative")
    data = Dataset(out)
    rel = list(data.samples("rel_depth"))
    assert rel, result.summary
    for s in rel:  # the answer names the object whose relative depth is smaller
        red, blue = s.meta["depth_red_relative"], s.meta["depth_blue_relative"]
        assert (s.answer == "red") == (red < blue) and "depth_red_m" not in s.meta
    assert list(data.samples("ta_nearer_object"))
    default = build_dataset(_coco(src, tmp_path / "all", depth_model=str(src / "relative"), tasks=[]))
    assert default.skipped["abs_depth"] == "relative depth model: no metres"
    assert not list(tmp_path.glob("ava-depth-*"))  # the maps are removed with the build


def test_metric_model_builds_abs_depth(src: Path, tmp_path: Path) -> None:
    result = build_dataset(_coco(src, tmp_path / "out", depth_model=str(src / "metric"), tasks=[]))
    assert "abs_depth" not in result.skipped and result.sources["depth"]["metric"] is True


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--depth-model", "NOTMODEL"], "no config.json there; not a transformers checkpoint"),
        (["--depth-model", "CLIP"], "a 'clip' checkpoint is not a depth-estimation model"),
        (["--depth-model", "RELATIVE", "--ava", "abs_depth"], "abs_depth asks for metres, and the --depth-model"),
        (["--depth-model", "RELATIVE", "--depth", "DEPTH"], "--depth and --depth-model both give depth"),
        (["--miner", "cache:dinov2"], "run `ava data options --miner cache:dinov2 --cache DIR` on the built"),
        (["--miner", "nearest"], "unknown miner 'nearest'"),
    ],
)
def test_bad_inputs_are_one_line_and_write_nothing(
    args: list[str], fragment: str, src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notmodel").mkdir()
    names = {
        "NOTMODEL": tmp_path / "notmodel",
        "CLIP": src / "clip",
        "RELATIVE": src / "relative",
        "DEPTH": src / "src" / "depth",
    }
    args = [str(names.get(a, a)) for a in args]
    out = tmp_path / "out"
    code, message = _run(
        [
            "data",
            "build",
            "--coco",
            str(src / "src" / "instances.json"),
            "--images",
            str(src / "src" / "images"),
            "--out",
            str(out),
            "-q",
            *args,
        ],
        capsys,
    )
    assert code == 2 and fragment in message and "Traceback" not in message, message
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_clip_miner_offers_the_classes_the_checkpoint_ranks_first(src: Path, tmp_path: Path) -> None:
    miner = f"clip@{src / 'clip'}"
    config = BuildConfig(
        out=tmp_path / "out",
        classes=[f"scene={src / 'src' / 'classes' / 'scene'}"],
        ava=["scene"],
        tasks=[],
        options=2,
        miner=miner,
    )
    result = build_dataset(config)
    assert result.sources["miner"]["miner"] == miner
    samples = list(Dataset(tmp_path / "out").samples("scene"))
    classes = sorted({s.answer for s in samples})
    assert len(classes) > 2  # so that 2 options leave a choice to the miner
    ranker = BuildMiner(miner)
    root = src / "src" / "classes" / "scene"
    for s in samples:
        rel = s.meta["origin"]["file"]
        from ava.curate.core import plain

        ranker.images[rel] = plain(root / rel)
        hardest = next(c for c in ranker.ranking(s.answer, classes, rel) if c != s.answer)
        assert sorted(s.options) == sorted([s.answer, hardest])
    again = build_dataset(BuildConfig(**{**config.__dict__, "out": tmp_path / "again"}))
    assert again.counts == result.counts
    assert [s.options for s in Dataset(tmp_path / "again").samples("scene")] == [s.options for s in samples]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the depth model on a GPU")
@pytest.mark.parametrize("kind", ["relative", "metric"])
def test_depth_maps_made_on_a_gpu_are_the_cpus(
    kind: str, src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ava data build --depth-model DIR --device cuda``: the maps the model makes on the GPU are those it makes on
    the CPU, within float32 rounding, where one of them is a depth (a relative model's non-positive disparity is no
    depth on either). cuDNN's TF32 convolutions are off here: with them the maps differ by design."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    coco = read_coco(src / "src" / "instances.json", src / "src" / "images")
    images = list(coco.images.values())[:3]
    maps = {d: dm.run(str(src / kind), images, tmp_path / d, device=d)[0] for d in ("cpu", "cuda")}
    for im in images:
        cpu, gpu = maps["cpu"].load(im), maps["cuda"].load(im)
        assert cpu.shape == gpu.shape == (im.height, im.width)
        both = np.isfinite(cpu) & np.isfinite(gpu)
        assert (np.isfinite(cpu) == np.isfinite(gpu)).mean() > 0.99 and both.any()  # (a sign flip at ~0 disparity)
        assert np.allclose(cpu[both], gpu[both], rtol=1e-3, atol=1e-5)
