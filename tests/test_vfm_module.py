"""Any in-memory model as a VFM (ava.vfm.module): the FrozenVFM contract, the identity, the cache, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from ava.errors import AvaError
from ava.vfm.module import vfm_from_module
from tests.helpers import tiny_vfm, tiny_vit


def test_contract_shapes_and_features_of_a_layer():
    model = tiny_vit()
    vfm = tiny_vfm(model)
    assert (vfm.num_tokens, vfm.dim, vfm.grid, vfm.layers) == (64, 64, (8, 8), (-1,))
    image = Image.new("RGB", (80, 40), (10, 200, 30))  # not square: padded with ava's colour
    x = vfm.preprocess(image)
    assert x.shape == (3, 64, 64) and torch.allclose(x[:, 0, 0], (torch.tensor([124, 120, 111]) / 255 - 0.5) / 0.5)
    out = vfm(x.unsqueeze(0))
    assert out.shape == (1, 1, 64, 64) and out.dtype == torch.float32
    with torch.no_grad():  # block 1's output, CLS dropped: what timm's own forward computes up to there
        model.eval()
        h = model.blocks(model.norm_pre(model._pos_embed(model.patch_embed(x.unsqueeze(0)))))
    assert torch.allclose(out[0, 0], h[0, 1:], atol=1e-6)


def test_forward_leaves_the_model_as_it_was():
    model = tiny_vit(drop=0.5).train()
    model.head.requires_grad_(False)
    vfm = tiny_vfm(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = vfm(torch.zeros(2, 3, 64, 64))
        assert torch.is_autocast_enabled("cpu")
    assert out.dtype == torch.float32  # autocast was off inside: fp32 features
    assert model.training and all(m.training for m in model.modules())
    assert not model.head.weight.requires_grad and model.blocks[0].attn.qkv.weight.requires_grad
    a, b = vfm(torch.ones(1, 3, 64, 64)), vfm(torch.ones(1, 3, 64, 64))
    assert torch.equal(a, b)  # eval mode: dropout off although the model trains


def test_bf16_dtype_runs_on_a_cast_copy_and_leaves_the_weights_alone():
    """dtype="bf16": the features are those of the model converted to bf16 (weights and activations), the model's own
    tensors keep their dtype, storage, bytes and version counters, and one cast serves every batch of an evaluation
    but not a forward after the weights changed."""
    import copy

    model = tiny_vit(seed=3).train()
    before = {k: (v.dtype, v.data_ptr(), v.clone()) for k, v in model.state_dict().items()}
    versions = [p._version for p in model.parameters()]
    vfm = tiny_vfm(model, dtype="bf16", version="v")
    assert vfm.identity()["compute_dtype"] == "bf16" and "compute_dtype" not in tiny_vfm(model).identity()
    x = torch.randn(3, 3, 64, 64)
    with vfm.held():
        out = vfm(x)
        assert torch.equal(vfm(x), out)
    with torch.no_grad():
        ref = copy.deepcopy(model).eval().to(torch.bfloat16)
        h = ref.blocks(ref.norm_pre(ref._pos_embed(ref.patch_embed(x.to(torch.bfloat16)))))
    assert out.dtype == torch.float32 and torch.equal(out[:, 0], h[:, 1:].float())
    fp32 = tiny_vfm(model, version="v")(x)
    assert 0 < (out - fp32).abs().max() < 0.1 * fp32.abs().max()  # bf16's rounding, not other features
    assert model.training and [p._version for p in model.parameters()] == versions
    for k, v in model.state_dict().items():
        assert (v.dtype, v.data_ptr()) == before[k][:2] and torch.equal(v, before[k][2]), k
    with vfm.held():
        assert torch.equal(vfm(x), out)
        with torch.no_grad():
            model.blocks[0].mlp.fc1.weight.mul_(2.0)  # an optimizer step
        assert not torch.equal(vfm(x), out)  # cast again: the weights changed


def test_module_returning_tokens_callable_and_bound_method():
    model = tiny_vit()
    whole = vfm_from_module(
        model.forward_features, name="ff", size=64, mean=(0.5,) * 3, std=(0.5,) * 3, prefix_tokens=1
    )
    assert whole.identity()["weights"].startswith("sha256:")  # a bound method: its module's weights are hashed
    assert (whole.num_tokens, whole.dim) == (64, 64)
    fn = vfm_from_module(
        lambda x: model.forward_features(x),
        name="fn",
        version="v1",
        size=64,
        mean=(0.5,) * 3,
        std=(0.5,) * 3,
        prefix_tokens=1,
    )
    x = torch.randn(2, 3, 64, 64)
    assert torch.equal(whole(x), fn(x))
    assert fn.identity()["weights"] is None and fn.identity()["version"] == "v1"


def test_identity_is_name_version_or_weights_hash():
    model = tiny_vit()
    hashed = tiny_vfm(model)
    versioned = tiny_vfm(model, version="step-100")
    before = hashed.identity()
    assert before["weights"].startswith("sha256:") and versioned.identity()["weights"] is None
    with torch.no_grad():
        model.blocks[0].mlp.fc1.weight[0, 0] += 1.0
    assert hashed.identity()["weights"] != before["weights"]  # another checkpoint, another identity
    assert tiny_vfm(tiny_vit(seed=0)).identity() == before  # the same weights: the same identity
    assert tiny_vfm(model, version="a").identity() != tiny_vfm(model, version="b").identity()
    assert tiny_vfm(model, version="a", weights_hash=True).identity()["weights"] == hashed.identity()["weights"]


class _Flat(torch.nn.Module):
    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape, self.w = shape, torch.nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], *self.shape) * self.w


@pytest.mark.parametrize("shape, seen", [((), "(1,)"), ((64,), "(1, 64)"), ((8, 8, 4), "(1, 8, 8, 4)")])
def test_output_not_batch_tokens_dim_is_one_clear_error(shape, seen):
    with pytest.raises(AvaError) as e:
        vfm_from_module(_Flat(shape), name="flat", size=32, mean=(0, 0, 0), std=(1, 1, 1))
    msg = str(e.value)
    assert "\n" not in msg and f"has shape {seen}" in msg and "[batch, tokens, dim]" in msg


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"name": ""}, "name= is required"),
        ({"name": None}, "name= is required"),
        ({"name": "x", "weights_hash": False}, "no identity"),
        ({"name": "x", "version": ""}, "must be a non-empty string"),
        ({"name": "x", "output": "blocks.9"}, "no sub-module 'blocks.9'"),
        ({"name": "x", "size": 0}, "size=0"),
        ({"name": "x", "mean": (0.5, 0.5)}, "must be 3 numbers"),
        ({"name": "x", "prefix_tokens": 65}, "drops them all"),
        ({"name": "x", "autocast": "int8"}, "autocast='int8'"),
        ({"name": "x", "dtype": "int8"}, "dtype='int8'; use None, 'bf16' or 'fp16'"),
        ({"name": "x", "dtype": "bf16", "autocast": "bf16"}, "autocast='bf16' and dtype='bf16': give one"),
    ],
)
def test_bad_arguments_are_named(kwargs, says):
    args = {"size": 64, "mean": (0.5,) * 3, "std": (0.5,) * 3, "output": "blocks.1", **kwargs}
    with pytest.raises(AvaError, match=says.replace("(", r"\(").replace(")", r"\)")):
        vfm_from_module(tiny_vit(), **args)


def test_a_plain_callable_needs_a_version():
    with pytest.raises(AvaError, match="no weights to hash; give version="):
        vfm_from_module(lambda x: torch.zeros(x.shape[0], 4, 8), name="f", size=32, mean=(0,) * 3, std=(1,) * 3)


def test_a_model_failing_on_an_image_is_named():
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied\nmore")

    with pytest.raises(AvaError, match=r"VFM 'b' failed on a 32x32 image: RuntimeError: mat1 and mat2 shapes"):
        vfm_from_module(Broken(), name="b", version="1", size=32, mean=(0,) * 3, std=(1,) * 3)


def test_extract_writes_a_normal_cache_keyed_by_the_checkpoint(tmp_path_factory, small_suite):
    from ava.cache import ExtractConfig, extract, open_cache
    from ava.cache.store import open_groups
    from ava.data.format import Dataset

    data = small_suite
    cache = tmp_path_factory.mktemp("cache")
    model = tiny_vit()
    vfm = tiny_vfm(model)
    config = ExtractConfig(vfm="", data=str(data), cache=str(cache), ava=["color"], progress=False, num_workers=0)
    first = extract(config, vfm=vfm)
    assert first["extracted"] == 20 and first["vfm"] == "tiny-vit"
    again = extract(config, vfm=tiny_vfm(tiny_vit()))  # the same weights: the same group, nothing to do
    assert again["key"] == first["key"] and again["extracted"] == 0 and again["already_done"] == 20
    with torch.no_grad():
        model.pos_embed += 0.1  # a later checkpoint: its own group beside the first
    later = extract(config, vfm=vfm)
    assert later["key"] != first["key"] and later["extracted"] == 20
    assert len(open_groups(cache)) == 2
    fc = open_cache(cache, "tiny-vit", key=later["key"])
    sample = Dataset(data).samples("color")[0]
    stored = fc.read([sample.image_sha256])[0]
    live = vfm(vfm.preprocess(Dataset(data).load_image(sample)).unsqueeze(0))[0, 0].numpy()
    assert np.array_equal(stored, live.astype(np.float16).astype(np.float32))  # the fp16 codec's rounding only
    assert fc.identity["name"] == "tiny-vit" and fc.identity["weights"].startswith("sha256:")
    assert set(fc.views) == {"mean", "grid2", "grid4"}


def test_output_that_is_no_tensor_is_named():
    with pytest.raises(AvaError, match=r"VFM 'd': the output is a dict, not a \[batch, tokens, dim\] tensor"):
        vfm_from_module(lambda x: {"a": 1}, name="d", version="1", size=32, mean=(0, 0, 0), std=(1, 1, 1))


class _Broken(torch.nn.Module):
    """Sound tokens on the first call (``vfm_from_module`` looks at one image), then ``kind`` in item 1 of a batch."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.calls, self.w = kind, 0, torch.nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        tokens = x.flatten(2)[:, :, :16].transpose(1, 2).repeat(1, 1, 4) * self.w  # [B, 16, 12]
        if self.calls == 1 or len(x) < 2:
            return tokens
        if self.kind == "complex":
            return tokens.to(torch.complex64)
        bad = tokens.clone()
        bad[1, 3, 5] = {"nan": float("nan"), "inf": float("inf"), "-inf": -float("inf")}[self.kind]
        return bad


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("nan", "returned NaN or infinite features for 1 of "),
        ("inf", "returned NaN or infinite features for 1 of "),
        ("-inf", "returned NaN or infinite features for 1 of "),
        ("complex", "returned complex features (complex64)"),
    ],
)
@pytest.mark.parametrize("path", ["extract", "in-memory"])
def test_unusable_features_are_refused_where_they_are_made(tmp_path, kind, says, path):
    import ava
    from ava.cache import open_cache
    from tests.helpers import make_dataset

    data = make_dataset(tmp_path / "data", n_images=4)
    vfm = vfm_from_module(_Broken(kind), name="broken", version="1", size=32, mean=(0, 0, 0), std=(1, 1, 1))
    with pytest.raises(AvaError) as e:
        if path == "extract":
            ava.extract(vfm, data, tmp_path / "cache", device="cpu", batch_size=2, num_workers=0, progress=False)
        else:
            ava.fingerprint(vfm, data, heads=["knn"], device="cpu")
    assert "VFM 'broken' " + says in str(e.value) and "\n" not in str(e.value), str(e.value)
    if path == "extract":  # nothing of the batch was kept: no row is done
        assert not open_cache(tmp_path / "cache", "broken").group.done_mask().any()


def test_on_a_device_the_finiteness_flags_are_read_later_with_the_shard():
    """Off the CPU the check returns its flags unread (a read per batch would stall the device); the extraction's
    shard checks read them with the shard's copies and raise the same error."""
    from ava.cache.extraction import _ShardChecks
    from ava.vfm.feature_check import check_features

    images = lambda at: ", ".join(f"image {i}" for i in at)  # noqa: E731
    flags = check_features(torch.empty(4, 1, 3, 2, device="meta"), "gpu-vfm", images)
    assert flags is not None and flags.device.type == "meta" and flags.shape == (4,)  # returned, never read
    checks = _ShardChecks(nonfinite=[("gpu-vfm", torch.tensor([False, True, False, True]), images)])
    with pytest.raises(
        AvaError,
        match=r"VFM 'gpu-vfm' returned NaN or infinite features for 2 of 4 image\(s\) of "
        r"a batch \(image 1, image 3\)",
    ):
        checks.settle(None)
    _ShardChecks(nonfinite=[("gpu-vfm", torch.zeros(4, dtype=torch.bool), images)]).settle(None)  # all finite
