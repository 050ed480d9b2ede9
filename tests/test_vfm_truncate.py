"""The encoder runs only up to the deepest chosen layer: features equal the whole model's hidden states, the blocks
after it, the post-norm and the pooling head are never called, and the identity (the cache key) is unchanged."""

from __future__ import annotations

import warnings

import pytest
import torch

from ava.vfm import load_vfm
from ava.vfm import preprocess as pp
from ava.vfm.model import TRUNCATED_CLASSES

torch.set_num_threads(1)
TINY = [
    "random-vit",
    "tiny-siglip",
    "tiny-siglip2",
    "tiny-siglip2-naflex",
    "tiny-aimv2",
    "tiny-clip",
    "tiny-dinov2",
    "tiny-dinov3-l",
    "tiny-internvit",
    "tiny-radio",
    "tiny-metaclip2-h",
    "tiny-tipsv2-b",
    "tiny-midas",
    "tiny-sam",
]


def _calls(model: torch.nn.Module, run: object) -> list[str]:
    """Names of the leaf modules ``model`` called during ``run()``, in order."""
    order: list[str] = []
    handles = [
        m.register_forward_hook(lambda _m, _a, _o, name=name: order.append(name))
        for name, m in model.named_modules()
        if not list(m.children())
    ]
    try:
        run()  # type: ignore[operator]
    finally:
        for h in handles:
            h.remove()
    return order


@pytest.mark.parametrize("key", TINY)
def test_truncated_forward_equals_the_whole_model_and_skips_the_rest(key: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vfm = load_vfm(key, layers=(-2,))
    assert type(vfm.model).__name__ in TRUNCATED_CLASSES and vfm._blocks is not None, key
    size = vfm.spec.image_size
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    inputs = pp.naflex_inputs(x, vfm.spec.patch_size) if vfm._layout == "naflex" else {"pixel_values": x}
    with torch.no_grad():
        full = vfm.model(**inputs, output_hidden_states=True).hidden_states
    truncated = _calls(vfm.model, lambda: vfm(x))
    assert torch.equal(vfm(x)[:, 0], vfm._tokens(full[-2])), key
    identity = vfm.identity()
    blocks, whole = vfm._blocks, _calls(vfm.model, lambda: vfm.model(**inputs))
    # the truncated run is the whole run cut after the last module of the deepest chosen block (-2: the one before
    # the last): later blocks, the post-norm and any pooling head are never called
    last = next(n for n, m in vfm.model.named_modules() if m is blocks[-2])
    end = max(i for i, name in enumerate(whole) if name.startswith(last + "."))
    assert truncated == whole[: end + 1], key
    later = next(n for n, m in vfm.model.named_modules() if m is blocks[-1])
    assert not any(name.startswith(later + ".") for name in truncated)
    vfm._blocks = None  # the whole model: the same features and identity
    assert torch.equal(vfm(x)[:, 0], vfm._tokens(full[-2])) and vfm.identity() == identity


def test_several_layers_and_the_embeddings() -> None:
    vfm = load_vfm("random-vit", layers=(-5, -3, -2))  # 4 blocks: the embeddings, blocks 1 and 2
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = vfm.model(pixel_values=x, output_hidden_states=True).hidden_states
    out = vfm(x)
    for i, layer in enumerate((-5, -3, -2)):
        assert torch.equal(out[:, i], vfm._tokens(full[layer])), layer
