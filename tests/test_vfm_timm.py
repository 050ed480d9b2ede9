"""The ``timm:`` family and ``effnet-lite0``, the extractor with real ImageNet weights (nothing downloaded).

Needs an importable timm (and so torchvision); skipped where it is not (the shared dev venv has no torchvision).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from ava.errors import AvaError
from ava.vfm import VFMS, load_vfm, param_count, resolve_vfm


def _timm_importable() -> bool:
    try:
        import timm  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure means: no timm family here
        return False
    return True


pytestmark = pytest.mark.skipif(not _timm_importable(), reason="timm (with torchvision) cannot be imported here")
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def ava_home(tmp_path_factory):
    """A private AVA_HOME: effnet-lite0 is converted from the installed package once for this module."""
    old = os.environ.get("AVA_HOME")
    os.environ["AVA_HOME"] = str(tmp_path_factory.mktemp("ava-home"))
    yield os.environ["AVA_HOME"]
    if old is None:
        os.environ.pop("AVA_HOME")
    else:
        os.environ["AVA_HOME"] = old


@pytest.fixture(scope="module")
def effnet(ava_home):
    return load_vfm("effnet-lite0")


def _tiny_vit(tmp_path, reg_tokens=2):
    """A 2-block, 64-wide timm ViT with CLS + registers, saved the way timm's hub repositories are."""
    import timm

    args = {
        "img_size": 32,
        "patch_size": 16,
        "embed_dim": 64,
        "depth": 3,
        "num_heads": 4,
        "reg_tokens": reg_tokens,
        "num_classes": 0,
    }
    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_224", pretrained=False, **args).eval()
    model.pretrained_cfg = {
        **model.pretrained_cfg,
        "input_size": (3, 32, 32),
        "mean": (0.1, 0.2, 0.3),
        "std": (0.5, 0.6, 0.7),
    }
    timm.models.save_for_hf(model, tmp_path, model_args=args, safe_serialization=True)
    return model


def test_effnet_lite0_classifies_real_photos(effnet):
    """The mapping is right: the classifier of the mapped weights names scikit-image's photos."""
    from PIL import Image
    from skimage import data

    assert not effnet.random_weights and effnet.identity()["weights"].startswith("sha256:")
    assert (effnet.spec.grid, effnet.spec.dim, effnet.spec.prefix_tokens) == ((14, 14), 112, 0)
    classifier = effnet.model.model
    with torch.no_grad():
        coffee = classifier(effnet.preprocess(Image.fromarray(data.coffee()))[None])[0]
        cat = classifier(effnet.preprocess(Image.fromarray(data.chelsea()))[None])[0]
    assert coffee.argmax().item() == 967  # espresso
    assert 281 <= cat.argmax().item() <= 285  # tabby, tiger, Persian, Siamese or Egyptian cat
    assert cat.softmax(-1)[281:286].sum() > 0.5


def test_effnet_lite0_converts_once_and_is_identified_by_its_files(effnet, ava_home):
    again = load_vfm("effnet-lite0")
    assert again.identity() == effnet.identity()
    folder = f"{ava_home}/vfm/effnet-lite0"
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
    assert json.loads(Path(folder, "config.json").read_text())["architecture"] == "tf_efficientnet_lite0"
    # the same files through the generic timm: route: same identity, same features
    generic = load_vfm(f"timm:{folder}")
    assert generic.identity() == effnet.identity()
    x = torch.randn(1, 3, 224, 224)
    torch.testing.assert_close(generic(x), effnet(x))
    assert param_count(VFMS.get("effnet-lite0")) == VFMS.get("effnet-lite0").params


def test_effnet_at_the_images_size_runs_channels_last(effnet):
    """``effnet-lite0#size=160`` (the demo's): a 10x10 grid of the same stage, its own cache identity; the CNN runs
    in channels-last memory with the same features as the standard layout."""
    small = load_vfm("effnet-lite0#size=160")
    assert (small.grid, small.dim) == ((10, 10), 112) and small.model.channels_last
    assert small.identity() == {**effnet.identity(), "image_size": 160, "grid": [10, 10], "num_tokens": 100}
    x = torch.randn(2, 3, 160, 160)
    fast = small(x)
    small.model.model.to(memory_format=torch.contiguous_format)
    small.model.channels_last = False
    torch.testing.assert_close(small(x), fast, atol=1e-4, rtol=1e-4)


def test_effnet_features_differ_from_random_vit_on_the_synthetic_suite(effnet, tmp_path):
    """Trained and random features order the same synthetic images differently (compare their distance matrices)."""
    from PIL import Image

    from ava.synth import SynthConfig, generate

    data = generate(
        SynthConfig(out=str(tmp_path / "d"), per_ava=8, ava=["color", "counting"], size=96, workers=1), progress=False
    )
    images = sorted(p for p in data.rglob("*.png"))[:16]
    random_vit = load_vfm("random-vit")

    def distances(vfm):
        x = torch.stack([vfm.preprocess(Image.open(p)) for p in images])
        pooled = torch.nn.functional.normalize(vfm(x)[:, 0].mean(1), dim=-1)
        d = 1 - pooled @ pooled.T
        return d[torch.triu_indices(len(images), len(images), 1).unbind()]

    a, b = distances(effnet), distances(random_vit)
    assert a.std() > 1e-3 and b.std() > 1e-4  # neither is constant
    rank = lambda v: v.argsort().argsort().float()  # noqa: E731
    spearman = torch.corrcoef(torch.stack([rank(a), rank(b)]))[0, 1].item()
    assert spearman < 0.9, spearman


def test_timm_dir_vit_with_registers(tmp_path):
    model = _tiny_vit(tmp_path)
    vfm = load_vfm(f"timm:{tmp_path}", layers=(-1, -2))
    spec = vfm.spec
    assert spec.model_class == "timm" and spec.loader == "timm"
    assert (spec.prefix_tokens, spec.prefix_desc, spec.grid, spec.dim) == (3, "1 CLS + 2 registers", (2, 2), 64)
    assert spec.mean == (0.1, 0.2, 0.3) and spec.std == (0.5, 0.6, 0.7) and spec.image_size == 32
    x = torch.randn(2, 3, 32, 32)
    out = vfm(x)
    assert tuple(out.shape) == (2, 2, 4, 64)
    with torch.no_grad():
        ref = model.forward_intermediates(x, indices=[1, 2], intermediates_only=True, output_fmt="NLC")
    torch.testing.assert_close(out[:, 0], ref[1])  # -1: the last block, prefix dropped
    torch.testing.assert_close(out[:, 1], ref[0])
    assert load_vfm(f"timm:{tmp_path}").identity() == load_vfm(f"timm:{tmp_path}").identity()
    assert load_vfm(f"timm:{tmp_path}").identity()["weights"].startswith("sha256:")
    with pytest.raises(AvaError, match="out of range"):
        load_vfm(f"timm:{tmp_path}", layers=(3,))


def test_timm_cnn_layers_and_strict_loading(tmp_path):
    import timm
    from safetensors.torch import load_file, save_file

    model = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    timm.models.save_for_hf(model, tmp_path / "cnn", safe_serialization=True)
    vfm = load_vfm(f"effnet-lite0@{tmp_path / 'cnn'}", layers=(-1,))  # the last stage: 320 channels, stride 32
    assert (vfm.spec.dim, vfm.spec.grid) == (320, (7, 7))
    assert tuple(vfm(torch.zeros(1, 3, 224, 224)).shape) == (1, 1, 49, 320)
    with pytest.raises(AvaError, match="different shapes"):
        load_vfm(f"effnet-lite0@{tmp_path / 'cnn'}", layers=(-1, -2))
    # a partial checkpoint is an error, not random weights for the missing part
    weights = load_file(tmp_path / "cnn" / "model.safetensors")
    weights.pop("conv_head.weight")
    save_file(weights, tmp_path / "cnn" / "model.safetensors")
    with pytest.raises(AvaError, match="cannot load timm"):
        load_vfm(f"effnet-lite0@{tmp_path / 'cnn'}")
    _tiny_vit(tmp_path / "vit")
    with pytest.raises(AvaError, match="holds timm 'vit_small_patch16_224'"):
        load_vfm(f"effnet-lite0@{tmp_path / 'vit'}")


def test_timm_names_resolve_offline_and_fail_clearly(monkeypatch, tmp_path):
    spec = resolve_vfm("timm:vit_pe_spatial_large_patch14_448.fb")  # timm's own pretrained config; no download
    assert (spec.hub_id, spec.image_size, spec.num_tokens, spec.dim) == (
        "timm/vit_pe_spatial_large_patch14_448.fb",
        448,
        1024,
        1024,
    )
    with pytest.raises(AvaError, match="timm has no model"):
        resolve_vfm("timm:no_such_model_xyz")
    with pytest.raises(AvaError, match="does not exist"):
        resolve_vfm(f"timm:{tmp_path}/missing/dir")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(AvaError, match="architecture"):
        resolve_vfm(f"timm:{tmp_path}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(AvaError, match="timm/vit_pe_spatial_large_patch14_448.fb"):
        load_vfm("timm:vit_pe_spatial_large_patch14_448.fb")


@pytest.mark.parametrize("key", [k for k in VFMS.names() if (VFMS.get(k).hub_id or "").startswith("timm/")])
def test_registered_timm_facts_are_timms_own(key):
    """The facts written out in the registry (so `ava vfm list` needs no timm) equal timm's pretrained config."""
    spec = VFMS.get(key)
    got = resolve_vfm(f"timm:{spec.hub_id.removeprefix('timm/')}")
    fields = ("hub_id", "image_size", "patch_size", "dim", "prefix_tokens", "prefix_desc", "mean", "std", "config")
    assert {f: getattr(got, f) for f in fields} == {f: getattr(spec, f) for f in fields}
    assert param_count(got) == spec.params and spec.loader == "timm"
