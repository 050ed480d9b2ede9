"""VFM registry, loading, preprocessing and the `ava vfm` CLI.

Full-size architectures are built on the meta device (no weights); tiny random models of every real class are
saved with ``save_pretrained`` and loaded back through the same paths a real checkpoint takes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from ava.errors import AvaError
from ava.vfm import VFMS, load_vfm, param_count, random_vfm, resolve_vfm, vfm_facts
from ava.vfm.preprocess import PAD_FILL, naflex_inputs, pad_preprocess, pad_to_square
from ava.vfm.zoo import NEW, REAL

torch.set_num_threads(1)

# patch tokens x dim of the paper's nine VFMs (plus radio-h, ViT-H/16 at 432)
PAPER = {
    "siglip2": (729, 1152),
    "siglip": (729, 1152),
    "aimv2": (576, 1536),
    "clip": (576, 1024),
    "internvit": (1024, 1024),
    "radio": (729, 1024),
    "radio-h": (729, 1280),
    "dinov2": (729, 1024),
    "sam": (576, 1024),
    "midas": (576, 768),
}
PAPER_PREFIX = {"siglip2": 0, "siglip": 0, "aimv2": 0, "clip": 1, "internvit": 1, "dinov2": 1, "sam": 0, "midas": 1}
# the 2026 additions: patch tokens, dim, prefix tokens (DINOv3: CLS + 4 registers; TIPSv2: CLS + 1 register)
NEW_FACTS = {
    "dinov3-l": (576, 1024, 5),
    "siglip2-naflex": (576, 1152, 0),
    "sam2.1-l": (576, 1152, 0),
    "tipsv2-b": (1024, 768, 2),
    "metaclip2-h": (256, 1280, 1),
    "webssl-dino1b": (256, 1536, 1),
    "pe-core-l": (576, 1024, 1),
    "pe-spatial-l": (1024, 1024, 1),
    "aimv2-timm": (576, 1536, 0),
    "sam3": (576, 1024, 0),
}
# published parameter counts of the vision towers (millions)
PUBLISHED_PARAMS_M = {"siglip": 428.2, "aimv2": 681, "clip": 303.5, "internvit": 304, "dinov2": 304.4, "sam": 308.3}
TINY = [k for k in VFMS.names() if k.startswith("tiny-")]


def test_registry_holds_the_paper_vfms_and_controls():
    assert set(PAPER) <= set(VFMS.names())
    assert {"pixels", "random-vit"} <= set(VFMS.names())
    # a tiny random model of every transformers class the registry uses (internvit loads through timm: its tiny
    # model is of transformers' InternVLVision class)
    classes = {VFMS.get(k).model_class for k in VFMS.names() if k not in TINY} - {"pixels", "timm", "ViTModel"}
    assert classes | {"InternVLVisionModel"} == {VFMS.get(k).model_class for k in TINY}
    assert VFMS.get("random-vit").random_weights and all(VFMS.get(k).random_weights for k in TINY)
    assert not any(VFMS.get(k).random_weights for k in [*PAPER, "pixels"])
    with pytest.raises(AvaError, match="Did you mean 'siglip"):
        resolve_vfm("siglpi")


def _needs_timm(spec):
    if spec.model_class == "timm":
        pytest.importorskip("timm", exc_type=ImportError)


@pytest.mark.parametrize("key", [s.key for s in [*REAL, *NEW]])
def test_full_size_architecture_on_meta(key):
    _needs_timm(VFMS.get(key))
    vfm = random_vfm(key, device="meta")
    spec = vfm.spec
    tokens_dim = PAPER[key] if key in PAPER else NEW_FACTS[key][:2]
    assert (spec.num_tokens, spec.dim) == tokens_dim
    if key in PAPER_PREFIX or key in NEW_FACTS:
        assert spec.prefix_tokens == (PAPER_PREFIX[key] if key in PAPER_PREFIX else NEW_FACTS[key][2])
    assert all(p.device.type == "meta" for p in vfm.model.parameters())
    # forward checks the raw hidden-state length == prefix + native grid, then drops the prefix and pools
    out = vfm(torch.empty(1, 3, spec.image_size, spec.image_size, device="meta"))
    assert tuple(out.shape) == (1, 1, *tokens_dim)
    assert vfm.layers == (-2,)
    n = param_count(spec)
    assert n == spec.params  # the declared count `ava vfm list` shows without building anything
    if key in PUBLISHED_PARAMS_M:
        assert n / 1e6 == pytest.approx(PUBLISHED_PARAMS_M[key], rel=0.01)


@pytest.mark.parametrize("key", [k for k in VFMS.names() if k not in {s.key for s in [*REAL, *NEW]}])
def test_declared_params_of_controls_and_tiny_models(key):
    spec = VFMS.get(key)
    _needs_timm(spec)
    assert spec.params is not None and param_count(spec) == spec.params


def _save_tiny(key, path):
    vfm = load_vfm(key)
    vfm.model.save_pretrained(path)
    return vfm


@pytest.mark.parametrize("key", [*TINY, "random-vit"])
def test_tiny_roundtrip_hf_dir_and_registry_path(key, tmp_path):
    spec = VFMS.get(key)
    built = _save_tiny(key, tmp_path)
    x = torch.randn(2, 3, spec.image_size, spec.image_size, generator=torch.Generator().manual_seed(1))
    ref = built(x)
    assert tuple(ref.shape) == (2, 1, spec.num_tokens, spec.dim)

    via_registry = load_vfm(f"{key}@{tmp_path}", layers=(-1, -2))
    both = via_registry(x)
    assert tuple(both.shape) == (2, 2, spec.num_tokens, spec.dim)
    torch.testing.assert_close(both[:, 1], ref[:, 0])
    assert not torch.allclose(both[:, 0], both[:, 1])

    pool = f"#pool={spec.grid[0]}" if spec.postprocess else ""
    generic = load_vfm(f"hf:{tmp_path}{pool}")
    assert generic.spec.model_class == spec.model_class
    assert generic.spec.prefix_tokens == spec.prefix_tokens
    torch.testing.assert_close(generic(x), ref)

    # the prefix count matches the model's own output: raw length = prefix + grid, and the first kept
    # token of layer -2 is the raw token right after the prefix
    inputs = naflex_inputs(x, spec.patch_size) if spec.model_class == "Siglip2VisionModel" else {"pixel_values": x}
    raw = generic.model(**inputs, output_hidden_states=True).hidden_states[-2]
    if raw.ndim == 4:  # SAM: [B, H, W, D]
        raw = raw.flatten(1, 2)
    gh, gw = spec.native_grid
    assert raw.shape[1] == spec.prefix_tokens + gh * gw
    if not spec.postprocess:
        torch.testing.assert_close(ref[:, 0, 0], raw[:, spec.prefix_tokens])


def test_frozen_and_identity(tmp_path):
    vfm = _save_tiny("tiny-clip", tmp_path)
    assert not any(p.requires_grad for p in vfm.parameters())
    vfm.train()
    assert not vfm.model.training
    ident = vfm.identity()
    assert ident["weights"].startswith("random:0:") and ident["random_weights"] is True
    assert ident["prefix_tokens"] == 1 and ident["layers"] == [-2] and ident["preprocess"] == "pad"

    local = load_vfm(f"hf:{tmp_path}")
    assert local.identity()["weights"].startswith("sha256:")
    assert str(tmp_path) not in json.dumps(local.identity())  # moving the directory keeps the identity
    assert load_vfm(f"hf:{tmp_path}").identity() == local.identity()
    assert load_vfm(f"tiny-clip@{tmp_path}").identity() == local.identity()  # same features, whatever the name
    assert load_vfm(f"hf:{tmp_path}", layers=(-3,)).identity() != local.identity()
    with torch.no_grad():
        next(local.model.parameters()).add_(1.0)
    local.model.save_pretrained(tmp_path)
    assert load_vfm(f"hf:{tmp_path}").identity()["weights"] != local.identity()["weights"]
    # the same tensors under another config give other features, so another identity
    before = load_vfm(f"hf:{tmp_path}").identity()["weights"]
    config = json.loads((tmp_path / "config.json").read_text())
    config["layer_norm_eps"] = 0.5
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert load_vfm(f"hf:{tmp_path}").identity()["weights"] != before


def test_layers_dtype_and_device_errors():
    with pytest.raises(AvaError, match="out of range"):
        load_vfm("tiny-dinov2", layers=(5,))
    with pytest.raises(AvaError, match="preprocess"):
        load_vfm("tiny-dinov2", preprocess="crop")
    with pytest.raises(AvaError, match="dtype"):
        load_vfm("tiny-dinov2", dtype="fp8")
    vfm = load_vfm("tiny-dinov2", layers=(0, 2))  # embeddings and last block, as negative indices
    assert vfm.layers == (-3, -1)
    with pytest.raises(AvaError, match="takes"):
        vfm(torch.zeros(1, 3, 32, 32))
    if not torch.cuda.is_available():
        with pytest.raises(AvaError, match="CUDA"):
            load_vfm("tiny-dinov2", device="cuda")


def test_pad_to_square_keeps_a_wide_image_whole():
    wide = Image.new("RGB", (200, 100), (255, 0, 0))
    wide.putpixel((0, 50), (0, 0, 255))  # content at the very left edge
    square = pad_to_square(wide)
    assert square.size == (200, 200)
    assert square.getpixel((100, 0)) == PAD_FILL and square.getpixel((100, 199)) == PAD_FILL
    assert square.getpixel((100, 100)) == (255, 0, 0)
    assert square.getpixel((0, 100)) == (0, 0, 255)  # nothing cut off
    tall = pad_to_square(Image.new("L", (30, 90), 255))
    assert tall.mode == "RGB" and tall.getpixel((0, 45)) == PAD_FILL and tall.getpixel((45, 45)) == (255, 255, 255)

    spec = VFMS.get("tiny-clip")
    x = pad_preprocess(wide, spec.image_size, spec.mean, spec.std)
    assert tuple(x.shape) == (3, spec.image_size, spec.image_size) and x.dtype == torch.float32
    fill = (torch.tensor(PAD_FILL) / 255 - torch.tensor(spec.mean)) / torch.tensor(spec.std)
    torch.testing.assert_close(x[:, 0, spec.image_size // 2], fill, atol=1e-3, rtol=0)  # top border: the fill


def test_processor_mode_crops_and_pad_mode_does_not(tmp_path):
    from transformers import CLIPImageProcessor

    _save_tiny("tiny-clip", tmp_path)
    CLIPImageProcessor(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56}).save_pretrained(tmp_path)
    wide = Image.new("RGB", (300, 100), (255, 255, 255))
    for y in range(100):
        for x in range(30):
            wide.putpixel((x, y), (0, 0, 0))  # a black band on the left tenth
    pad = load_vfm(f"tiny-clip@{tmp_path}").preprocess(wide)
    proc_vfm = load_vfm(f"tiny-clip@{tmp_path}", preprocess="processor")
    proc = proc_vfm.preprocess(wide)
    assert pad.shape == proc.shape == (3, 56, 56)
    black = (0 - torch.tensor(VFMS.get("tiny-clip").mean)) / torch.tensor(VFMS.get("tiny-clip").std)
    assert torch.allclose(pad[:, 28, 1], black, atol=0.05)  # pad keeps the left band
    assert (proc[:, :, 0] - black[:, None]).abs().min() > 1.0  # the processor's centre crop cut it off
    assert "processor_sha256" in proc_vfm.identity()
    with pytest.raises(AvaError, match="image processor"):
        load_vfm("tiny-clip", preprocess="processor")


def test_pixels_baseline_is_exact():
    vfm = load_vfm("pixels", layers=(-2,))  # pixels has one layer; requested layers are ignored
    assert vfm.layers == (-1,) and not vfm.random_weights and vfm.identity()["weights"] == "pixels"
    yy, xx = np.mgrid[0:224, 0:224]
    array = np.stack([xx, yy, (xx + yy) % 256], axis=-1).astype(np.uint8)
    out = vfm(vfm.preprocess(Image.fromarray(array))[None])
    assert tuple(out.shape) == (1, 1, 196, 768)
    token = out[0, 0, 14 * 2 + 3]  # patch row 2, column 3
    patch = array[32:48, 48:64].astype(np.float32).transpose(2, 0, 1).reshape(-1)  # channel-major (c, y, x)
    expected = (torch.from_numpy(patch) / 255.0 - 0.5) / 0.5
    torch.testing.assert_close(token, expected, rtol=0, atol=1e-6)
    assert token[0].item() == pytest.approx((48 / 255 - 0.5) / 0.5)  # R = x of the patch's first pixel


def test_offline_without_a_local_copy_says_how_to_point_at_one(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(AvaError) as err:
        load_vfm("clip")
    msg = str(err.value)
    assert "openai/clip-vit-large-patch14-336" in msg and "clip@/path/to/dir" in msg and "hf:/path/to/dir" in msg
    assert "HF_HOME" in msg
    with pytest.raises(AvaError, match="nobody/no-such-vfm"):
        load_vfm("hf:nobody/no-such-vfm")
    with pytest.raises(AvaError, match="does not exist"):
        load_vfm(f"hf:{tmp_path}/missing")


def test_local_dir_errors(tmp_path):
    _save_tiny("tiny-clip", tmp_path / "pickled")
    (tmp_path / "pickled" / "model.safetensors").rename(tmp_path / "pickled" / "pytorch_model.bin")
    with pytest.raises(AvaError, match="safetensors"):
        load_vfm(f"hf:{tmp_path / 'pickled'}")
    _save_tiny("tiny-clip", tmp_path / "clip")
    with pytest.raises(AvaError, match="do not fit|not a native"):
        load_vfm(f"tiny-dinov2@{tmp_path / 'clip'}")


def test_hf_unknown_class_needs_the_prefix_count(tmp_path):
    from transformers import DeiTConfig, DeiTModel

    config = DeiTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=16
    )
    model = DeiTModel(config)
    model.save_pretrained(tmp_path)
    with pytest.raises(AvaError, match="prefix=N"):
        resolve_vfm(f"hf:{tmp_path}")
    with pytest.raises(AvaError, match="prefix"):  # a wrong count is caught on the first forward
        load_vfm(f"hf:{tmp_path}#prefix=1")(torch.zeros(1, 3, 32, 32))
    vfm = load_vfm(f"hf:{tmp_path}#prefix=2")  # DeiT: CLS + distillation token
    assert tuple(vfm(torch.zeros(1, 3, 32, 32)).shape) == (1, 1, 4, 32)
    facts = vfm_facts(f"hf:{tmp_path}#prefix=2")
    assert facts["params"] == sum(p.numel() for p in model.parameters()) and facts["prefix_tokens"] == 2


def test_cli_list_and_show():
    from ava.cli.main import app

    runner = CliRunner()
    result = runner.invoke(app, ["vfm", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["key"]: r for r in json.loads(result.output)}
    assert set(rows) == set(VFMS.names())
    assert rows["sam"]["num_tokens"] == 576 and rows["sam"]["postprocess"] == "pool:24x24"
    assert rows["pixels"]["params"] == 0 and rows["clip"]["params"] > 3e8
    result = runner.invoke(app, ["vfm", "show", "dinov2", "--json"])
    facts = json.loads(result.output)
    assert (
        facts["image_size"] == 384 and facts["grid"] == [27, 27] and facts["params"] == param_count(VFMS.get("dinov2"))
    )
    result = runner.invoke(app, ["vfm", "list"])
    assert result.exit_code == 0 and "siglip2" in result.output
    result = runner.invoke(app, ["vfm", "show", "radio"])
    assert result.exit_code == 0 and "RadioModel" in result.output


def _tiny_text():
    return {
        "vocab_size": 100,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "eos_token_id": 1,
        "bos_token_id": 0,
    }


def _tiny_sam3(tiny):
    """A whole tiny Sam3Model (vision encoder, CLIP text tower, DETR, geometry and mask decoders), as facebook/sam3."""
    import transformers as T

    small = {"hidden_size": 32, "num_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    text = {"model_type": "clip_text_model", **_tiny_text(), "projection_dim": 32, "max_position_embeddings": 32}
    cfg = T.Sam3Config(
        vision_config={**tiny, "fpn_hidden_size": 32},
        text_config=text,
        geometry_encoder_config=small,
        detr_encoder_config=small,
        detr_decoder_config={**small, "num_queries": 4},
        mask_decoder_config={"hidden_size": 32, "num_attention_heads": 2},
    )
    full = T.Sam3Model(cfg).eval()
    return full, full.vision_encoder


@pytest.mark.parametrize("key", ["tiny-aimv2", "tiny-sam", "tiny-sam3"])
def test_composite_checkpoint_loads_its_vision_tower(key, tmp_path):
    import transformers as T

    from ava.vfm.families import FAMILIES

    tiny = FAMILIES[VFMS.get(key).model_class].tiny
    torch.manual_seed(0)
    if key == "tiny-aimv2":  # vision weights under "vision_model.": the class alone cannot load them
        full = T.Aimv2Model(T.Aimv2Config(text_config=_tiny_text(), vision_config=tiny)).eval()
        tower = full.vision_model
    elif key == "tiny-sam":
        full = T.SamModel(T.SamConfig(vision_config={**tiny, "output_channels": 256})).eval()
        tower = full.vision_encoder
    else:  # SAM 3's hub checkpoint is the whole detector: ava takes its vision encoder
        full, tower = _tiny_sam3(tiny)
    full.save_pretrained(tmp_path)
    vfm = load_vfm(f"{key}@{tmp_path}", layers=(-1,))
    x = torch.randn(1, 3, vfm.spec.image_size, vfm.spec.image_size)
    with torch.no_grad():
        raw = tower(pixel_values=x, output_hidden_states=True).hidden_states[-1]
    out = load_vfm(f"hf:{tmp_path}", layers=(-1,))(x)  # no pooling: raw tokens
    torch.testing.assert_close(out[0, 0], raw.reshape(-1, raw.shape[-1]))
    assert tuple(vfm(x).shape) == (1, 1, vfm.num_tokens, vfm.dim)


def test_hub_snapshot_is_identified_by_its_commit(monkeypatch, tmp_path):
    import huggingface_hub.constants as hub

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--someorg--tiny-clip"
    _save_tiny("tiny-clip", repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    vfm = load_vfm("tiny-clip@someorg/tiny-clip")
    assert vfm.identity()["weights"] == f"hub:someorg/tiny-clip@{commit}"
    assert vfm.spec.key == "tiny-clip@someorg/tiny-clip" and "vfm" not in vfm.identity()  # no name in the key


def test_remote_code_never_runs_by_default(tmp_path):
    marker = tmp_path / "code_ran"
    (tmp_path / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "evil_vit", "auto_map": {"AutoModel": "modeling_evil.EvilModel"}})
    )
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(AvaError, match="trust-remote-code"):
        load_vfm(f"radio@{tmp_path}")
    with pytest.raises(AvaError, match="its own Python code"):
        load_vfm(f"hf:{tmp_path}")
    assert not marker.exists()


def test_key_random_is_the_full_size_architecture_at_random_weights():
    spec = resolve_vfm("dinov2:random")
    assert spec.key == "dinov2:random" and spec.random_weights and spec.hub_id is None
    assert (spec.num_tokens, spec.dim) == (729, 1024)
    with pytest.raises(AvaError, match="no architecture"):
        resolve_vfm("pixels:random")


def test_preprocess_fn_is_small_and_picklable():
    """DataLoader workers (spawn/forkserver) get the preprocessing function, not the model."""
    import pickle

    vfm = load_vfm("tiny-dinov2")
    image = Image.new("RGB", (30, 20), (10, 200, 30))
    blob = pickle.dumps(vfm.preprocess_fn())
    assert len(blob) < 10_000 < len(pickle.dumps(vfm))
    assert torch.equal(pickle.loads(blob)(image), vfm.preprocess(image))


def test_raw_pixels_are_uint8_and_give_the_same_features():
    """The extraction's workers send uint8 pixels (a quarter of the bytes); the model normalizes them on its device
    to the very values ``preprocess`` gives, so the features are bitwise the same."""
    import pickle

    from ava.cache.extraction import _worker_preprocess

    vfm = load_vfm("tiny-dinov2")
    images = [Image.new("RGB", (30, 20), (10, 200, 30)), Image.new("RGB", (17, 40), (250, 3, 99))]
    raw = torch.stack([pickle.loads(pickle.dumps(_worker_preprocess(vfm)))(im) for im in images])
    assert raw.dtype == torch.uint8
    normalized = torch.stack([vfm.preprocess(im) for im in images])
    assert raw.element_size() * 4 == normalized.element_size()
    assert torch.equal(vfm(raw), vfm(normalized))


def test_normalized_pixels_are_the_preprocess_values_bit_for_bit():
    """normalize_pixels (on the model's device, mean and std filled there, no copy from the host that would wait for
    the queued forward) gives to_normalized_tensor's float32 values, with a model's odd means and stds."""
    from ava.vfm import preprocess as pp

    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (2, 24, 31, 3), dtype=np.uint8)
    for mean, std in (
        ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
        ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
        ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ):
        want = torch.stack([pp.to_normalized_tensor(Image.fromarray(a), mean, std) for a in rgb])
        got = pp.normalize_pixels(torch.from_numpy(rgb).permute(0, 3, 1, 2).contiguous(), mean, std)
        assert got.dtype == torch.float32 and torch.equal(got, want), mean


def test_gated_repositories_say_how_to_get_access(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError

    assert VFMS.get("dinov3-l").gated and VFMS.get("dinov3-l").facts()["gated"] and VFMS.get("sam3").gated
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for key in ("dinov3-l", "sam3"):
        with pytest.raises(AvaError) as err:
            load_vfm(key)
        assert "gated repository" in str(err.value) and "accept its licence" in str(err.value)
    monkeypatch.delenv("HF_HUB_OFFLINE")

    def refuse(repo_id, **kwargs):
        if kwargs.get("local_files_only"):
            raise FileNotFoundError(repo_id)
        error = GatedRepoError.__new__(GatedRepoError)  # as the hub client raises it, minus an HTTP response
        Exception.__init__(error, f"403 Client Error: access to {repo_id} is restricted")
        raise error

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    for name in ("hf:facebook/sam3", "sam3", "dinov3-l"):  # hf: knows nothing of the repo: the hub says gated
        with pytest.raises(AvaError) as err:
            load_vfm(name)
        message = str(err.value)
        assert "gated" in message and "huggingface.co/facebook/" in message and "HF_TOKEN" in message
        assert "Traceback" not in message and "403" not in message


def test_size_option_runs_a_model_at_another_input_size():
    """``NAME#size=S``: the size is in the name and the identity (caches at two sizes never mix); a model whose
    position table fixes its input refuses other sizes in one line; bad options are refused before anything loads."""
    from ava.vfm.resolve import check_name

    small, plain = load_vfm("pixels#size=64"), load_vfm("pixels")
    assert small.spec.key == "pixels#size=64" and small.grid == (4, 4) and plain.grid == (14, 14)
    assert small(torch.zeros(1, 3, 64, 64)).shape == (1, 1, 16, 768)
    assert small.identity()["image_size"] == 64 and small.identity() != plain.identity()
    assert resolve_vfm("tiny-dinov2#size=28").image_size == 28  # DINOv2 interpolates its position table
    assert load_vfm("tiny-dinov2#size=28")(torch.zeros(1, 3, 28, 28)).shape == (1, 1, 4, 64)
    vit = load_vfm("random-vit#size=160")
    with pytest.raises(AvaError, match=r"'random-vit#size=160' \(ViTModel\) cannot run on 160x160 images"):
        vit(torch.zeros(1, 3, 160, 160))
    bad_names = [
        ("pixels#size=100", "not a multiple of pixels's patch size"),
        ("pixels#pool=4", "takes only '#size=S'"),
        ("pixels#size=0", "bad option 'size=0'"),
    ]
    for bad, match in bad_names:
        with pytest.raises(AvaError, match=match):
            resolve_vfm(bad)
    with pytest.raises(AvaError, match="takes only"):
        check_name("effnet-lite0#prefix=1")  # parse time: no torch, no timm
    assert check_name("effnet-lite0#size=160") == "effnet-lite0#size=160"
