"""RADIO checkpoints in the publisher's remote-code layout, mapped into transformers' RadioModel (ava.vfm.mapped).

The published names and shapes follow NVlabs' RADIO code (``hf_hub.py`` saves ``RADIOModel``: ``radio_model.model``
is a timm ViT with a CPE ``patch_generator``, ``radio_model.input_conditioner``, ``radio_model.summary_idxs``,
``radio_model.adaptors.<teacher>.{head_mlp,feat_mlp}``). Nothing is downloaded and no remote code exists here: the
reference forward below is written from that layout in plain torch (timm's block: fused qkv, pre-norm, GELU MLP).
"""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
import torch.nn.functional as F

from ava.errors import AvaError
from ava.vfm import VFMS, load_vfm
from ava.vfm.mapped import RADIO, map_radio, radio_config, radio_from_state

P = RADIO + "model."
TEACHERS = [{"name": "clip"}, {"name": "siglip"}, {"name": "dino_v2"}, {"name": "sam", "use_summary": False}]


def published_config(teachers=TEACHERS, register_multiple=8, model="vit_large_patch16_224", **extra):
    """config.json as NVlabs' hf_hub.py writes it (the args of the training run, the adaptors, auto_map)."""
    return {
        "architectures": ["RADIOModel"],
        "auto_map": {"AutoConfig": "hf_model.RADIOConfig", "AutoModel": "hf_model.RADIOModel"},
        "args": {
            "model": model,
            "teachers": teachers,
            "cls_token_per_teacher": True,
            "register_multiple": register_multiple,
            "cpe_max_size": 2048,
            "model_kwargs": {},
        },
        "version": "radio_v2.5-l",
        "patch_size": 16,
        "max_resolution": 2048,
        "preferred_resolution": [768, 768],
        "adaptor_names": ["clip"],
        "vitdet_window_size": None,
        **extra,
    }


def published_state(dim, depth, table, tokens, *, patch=16, mlp=4, device="cpu", seed=0, summary=(0, 1, 2)):
    """A state dict with the published names: scaled-down shapes on the CPU, full-size ones on the meta device."""
    gen = torch.Generator().manual_seed(seed)

    def t(*shape, scale=0.1, base=0.0):
        if device == "meta":
            return torch.empty(shape, device="meta")
        return base + scale * torch.randn(shape, generator=gen)

    sd = {
        P + "patch_generator.embedder.weight": t(dim, 3 * patch * patch, scale=0.05),
        P + "patch_generator.pos_embed": t(1, table * table, dim),
        P + "patch_generator.cls_token.token": t(tokens, dim),
        RADIO + "input_conditioner.norm_mean": torch.tensor([0.4815, 0.4578, 0.4082], device=device).view(3, 1, 1),
        RADIO + "input_conditioner.norm_std": torch.tensor([0.2686, 0.2613, 0.2758], device=device).view(3, 1, 1),
        RADIO + "summary_idxs": torch.tensor(summary, dtype=torch.int64, device=device),
        RADIO + "adaptors.clip.head_mlp.fc1.weight": t(32, dim),  # a teacher head: dropped by rule
        RADIO + "adaptors.clip.feat_mlp.fc1.weight": t(32, dim),
    }
    parts = {
        "norm1.weight": (dim,),
        "norm1.bias": (dim,),
        "attn.qkv.weight": (3 * dim, dim),
        "attn.qkv.bias": (3 * dim,),
        "attn.proj.weight": (dim, dim),
        "attn.proj.bias": (dim,),
        "norm2.weight": (dim,),
        "norm2.bias": (dim,),
        "mlp.fc1.weight": (mlp * dim, dim),
        "mlp.fc1.bias": (mlp * dim,),
        "mlp.fc2.weight": (dim, mlp * dim),
        "mlp.fc2.bias": (dim,),
    }
    for i in range(depth):
        for part, shape in parts.items():
            sd[f"{P}blocks.{i}.{part}"] = t(*shape, base=1.0 if part.startswith("norm") and "weight" in part else 0.0)
    return sd


def reference_hidden(sd, x, heads):
    """The published model's hidden states in plain torch: CPE patch generator, then timm blocks."""
    x = (x - sd[RADIO + "input_conditioner.norm_mean"]) / sd[RADIO + "input_conditioner.norm_std"]
    embed = sd[P + "patch_generator.embedder.weight"]
    patch = math.isqrt(embed.shape[1] // 3)
    b, c, h, w = x.shape
    gh, gw = h // patch, w // patch
    patches = x.reshape(b, c, gh, patch, gw, patch).permute(0, 2, 4, 1, 3, 5).reshape(b, gh * gw, -1)  # (c yy xx)
    t = patches @ embed.T
    pos = sd[P + "patch_generator.pos_embed"]
    side = math.isqrt(pos.shape[1])
    pos = pos.reshape(1, side, side, -1).permute(0, 3, 1, 2)
    pos = F.interpolate(pos, size=(max(gh, gw),) * 2, mode="bilinear", align_corners=False)[..., :gh, :gw]
    t = torch.cat([sd[P + "patch_generator.cls_token.token"].expand(b, -1, -1), t + pos.flatten(2).transpose(1, 2)], 1)
    dim, hidden, i = t.shape[-1], [t], 0
    while f"{P}blocks.{i}.norm1.weight" in sd:
        w = {k.removeprefix(f"{P}blocks.{i}."): v for k, v in sd.items() if k.startswith(f"{P}blocks.{i}.")}
        y = F.layer_norm(t, (dim,), w["norm1.weight"], w["norm1.bias"], eps=1e-6)
        qkv = F.linear(y, w["attn.qkv.weight"], w["attn.qkv.bias"]).reshape(b, t.shape[1], 3, heads, dim // heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t.shape[1], dim)
        t = t + F.linear(att, w["attn.proj.weight"], w["attn.proj.bias"])
        y = F.layer_norm(t, (dim,), w["norm2.weight"], w["norm2.bias"], eps=1e-6)
        y = F.gelu(F.linear(y, w["mlp.fc1.weight"], w["mlp.fc1.bias"]))
        t = t + F.linear(y, w["mlp.fc2.weight"], w["mlp.fc2.bias"])
        hidden.append(t)
        i += 1
    return hidden


def save_published(folder, sd, config):
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_full_size_radio_l_names_round_trip_into_radio_model_on_meta():
    """RADIO-L's published names at full size (ViT-L/16, CPE table 2048/16 = 128, 4 summary + 4 register tokens):
    every backbone tensor lands in RadioModel, nothing is missing, only the teacher heads are dropped."""
    sd = published_state(1024, 24, 128, 8, device="meta")
    mapped, dropped = map_radio(sd, "RADIO-L")
    assert sorted(dropped) == [RADIO + "adaptors.clip.feat_mlp.fc1.weight", RADIO + "adaptors.clip.head_mlp.fc1.weight"]
    cfg = radio_config(published_config(), {k: tuple(v.shape) for k, v in sd.items()}, "RADIO-L")
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["max_img_size"]) == (
        1024,
        24,
        16,
        2048,
    )
    assert (cfg["num_cls_tokens"], cfg["num_registers"], cfg["patch_size"], cfg["mlp_ratio"]) == (4, 4, 16, 4.0)
    model = radio_from_state(sd, published_config(), torch.float32, "RADIO-L")
    # the installed transformers' attention names, back to map_radio's (q/k/v/o_proj; before the rename, ViT's)
    older = {
        "attention.attention.query": "attention.q_proj",
        "attention.attention.key": "attention.k_proj",
        "attention.attention.value": "attention.v_proj",
        "attention.output.dense": "attention.o_proj",
    }
    native = {re.sub("|".join(map(re.escape, older)), lambda m: older[m[0]], k) for k in model.state_dict()}
    lambdas = {k for k in native if k.endswith("lambda1")}  # the publisher's blocks have none: identity scale
    assert native - lambdas == set(mapped)
    assert len(mapped) == len(sd) - len(dropped) + 2 * 2 * 24  # each fused qkv weight and bias became three
    spec = VFMS.get("radio")  # the registry's RADIO-L facts are those of the mapped architecture
    assert spec.loader == "mapped" and spec.prefix_tokens == 8 and spec.dim == 1024
    assert sum(p.numel() for p in model.parameters()) == spec.params


def test_mapped_features_equal_the_published_forward(tmp_path):
    """tiny-radio's shapes (64 wide, 2 blocks, 2 summary + 2 registers) in the published layout: `radio@DIR`
    maps them and layer -2 equals the reference forward at the same layer, prefix dropped; no remote code."""
    teachers = [{"name": "clip"}, {"name": "dino_v2"}]
    sd = published_state(64, 2, 16, 4, summary=(0, 1))
    config = published_config(teachers, register_multiple=4)
    config["args"]["model_kwargs"] = {"num_heads": 4}  # the publisher passes model_kwargs on to timm's ViT
    folder = save_published(tmp_path / "radio-l", sd, config)
    vfm = load_vfm(f"tiny-radio@{folder}")
    assert vfm.spec.prefix_tokens == 4 and vfm.identity()["mapping"].startswith("radio-remote-code")
    x = torch.rand(2, 3, 64, 64)  # [0, 1] pixels: RADIO normalizes inside (its input conditioner)
    out = vfm(x)
    ref = reference_hidden(sd, x, heads=4)
    torch.testing.assert_close(out[:, 0], ref[-2][:, 4:], atol=1e-5, rtol=1e-4)
    last = load_vfm(f"tiny-radio@{folder}", layers=(-1,))(x)
    torch.testing.assert_close(last[:, 0], ref[-1][:, 4:], atol=1e-5, rtol=1e-4)
    assert not list(folder.glob("*.py"))
    with pytest.raises(AvaError, match=f"load it with '--vfm radio@{folder}'"):
        load_vfm(f"hf:{folder}")  # hf: reads configs through transformers: it points at the mapped route
    with pytest.warns(UserWarning, match="the checkpoint's config has 4 prefix tokens, the registry says 8"):
        wide = load_vfm(f"radio@{folder}")  # RADIO-L's registry facts, the checkpoint's own width and prefix
    assert (wide.dim, wide.spec.prefix_tokens, wide.grid) == (64, 4, (27, 27))
    assert tuple(wide(torch.rand(1, 3, 432, 432)).shape) == (1, 1, 729, 64)


def test_partial_or_foreign_radio_checkpoints_are_refused(tmp_path):
    teachers = [{"name": "clip"}, {"name": "dino_v2"}]
    config = published_config(teachers, register_multiple=4)
    config["args"]["model_kwargs"] = {"num_heads": 4}
    sd = published_state(64, 2, 16, 4, summary=(0, 1))
    missing = {k: v for k, v in sd.items() if not k.endswith("blocks.1.mlp.fc2.weight")}
    with pytest.raises(AvaError, match=r"lacks 1 tensor\(s\) RadioModel needs, e.g. encoder.layer.1.mlp.fc2.weight"):
        load_vfm(f"tiny-radio@{save_published(tmp_path / 'partial', missing, config)}")
    extra = sd | {P + "blocks.0.attn.q_norm.weight": torch.ones(16)}
    with pytest.raises(AvaError, match=r"a block part the native class lacks \(radio_model.model.blocks.0.attn.q_norm"):
        load_vfm(f"tiny-radio@{save_published(tmp_path / 'qknorm', extra, config)}")
    bare = {k: v for k, v in sd.items() if "input_conditioner" not in k and "summary_idxs" not in k}
    with pytest.warns(UserWarning, match="4 prefix tokens"):  # buffers the publisher's code fills by default
        plain = load_vfm(f"radio@{save_published(tmp_path / 'bare', bare, config)}").model
    assert plain.summary_idxs.tolist() == [0, 1] and plain.input_conditioner.norm_std.flatten()[0].item() > 0.26
    pooled = sd | {P + "fc_norm.weight": torch.ones(64), P + "fc_norm.bias": torch.zeros(64)}  # classifier side
    assert load_vfm(f"tiny-radio@{save_published(tmp_path / 'pooled', pooled, config)}").spec.prefix_tokens == 4
    prenorm = sd | {P + "norm_pre.weight": torch.ones(64)}  # it would act on every token: refused
    with pytest.raises(AvaError, match="no place in RadioModel, e.g. radio_model.model.norm_pre.weight"):
        load_vfm(f"tiny-radio@{save_published(tmp_path / 'prenorm', prenorm, config)}")
    stray = sd | {RADIO + "something_else.weight": torch.ones(2)}
    with pytest.raises(AvaError, match="have no place in RadioModel, e.g. radio_model.something_else.weight"):
        load_vfm(f"tiny-radio@{save_published(tmp_path / 'stray', stray, config)}")
    normed = sd | {P + "norm.weight": torch.ones(64), P + "norm.bias": torch.zeros(64)}
    with pytest.raises(AvaError, match=r"a final norm \(model_norm\).*--trust-remote-code"):
        load_vfm(f"tiny-radio@{save_published(tmp_path / 'normed', normed, config)}")
    wrong = sd | {P + "blocks.0.mlp.fc1.bias": torch.zeros(100)}
    with pytest.raises(AvaError, match="do not fit RadioModel: .*size mismatch"):
        load_vfm(f"tiny-radio@{save_published(tmp_path / 'wrong', wrong, config)}")
    with pytest.raises(AvaError, match="not a timm ViT ava knows"):
        radio_config(published_config(model="eradio"), {k: tuple(v.shape) for k, v in sd.items()}, "E-RADIO")


def test_ava_mapping_equals_transformers_own_radio_conversion(tmp_path):
    """A second, independent mapping: transformers' conversion table for the ``radio`` model type, applied by
    RadioModel.from_pretrained to the published tensor names, gives the same state dict as ava's mapping."""
    import transformers
    from safetensors.torch import save_file

    config = published_config([{"name": "clip"}, {"name": "dino_v2"}], register_multiple=4)
    config["args"]["model_kwargs"] = {"num_heads": 4}
    sd = published_state(64, 2, 16, 4, summary=(0, 1))
    ours = radio_from_state(sd, config, torch.float32, "tiny").state_dict()
    kwargs = radio_config(config, {k: tuple(v.shape) for k, v in sd.items()}, "tiny")
    transformers.RadioConfig(**kwargs).save_pretrained(tmp_path)
    save_file({k: v for k, v in sd.items() if ".adaptors." not in k}, str(tmp_path / "model.safetensors"))
    theirs, info = transformers.RadioModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info  # nothing missing, unexpected or mismatched
    theirs = theirs.state_dict()
    assert set(ours) == set(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_both_attention_layouts_of_radio_model_are_filled_and_an_unknown_one_is_named():
    """transformers renamed RadioModel's attention (ViT-style ``attention.attention.query`` ... ``output.dense``
    before, ``q_proj`` ... ``o_proj`` after): the layout is read off the installed class's own state dict, each gets
    every projection, and a third is refused naming what it found."""
    from ava.vfm import mapped

    canon = {f"encoder.layer.3.attention.{p}_proj.{k}": (p, k) for p in "qkvo" for k in ("weight", "bias")}
    canon["encoder.layer.3.mlp.fc1.weight"] = ("mlp", "weight")
    newer = {f"encoder.layer.0.attention.{p}_proj.weight": 0 for p in "qkvo"}
    older = {f"encoder.layer.0.attention.attention.{p}.weight": 0 for p in ("query", "key", "value")}
    older["encoder.layer.0.attention.output.dense.weight"] = 0
    assert mapped._in_native_names(canon, mapped._native_attention_names(newer, "x")) == canon
    renamed = mapped._in_native_names(canon, mapped._native_attention_names(older, "x"))
    assert renamed["encoder.layer.3.attention.attention.key.bias"] == ("k", "bias")
    assert renamed["encoder.layer.3.attention.output.dense.weight"] == ("o", "weight")
    assert renamed["encoder.layer.3.mlp.fc1.weight"] == ("mlp", "weight") and len(renamed) == len(canon)
    foreign = {"encoder.layer.0.attention.qkv.weight": 0}
    with pytest.raises(AvaError, match=r"RADIO-X: transformers .*RadioModel names its attention .*attention\.qkv"):
        mapped._native_attention_names(foreign, "RADIO-X")


def test_a_transformers_without_radio_model_is_named(monkeypatch):
    """An older transformers (no RadioModel): the error says so, not an AttributeError."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(__version__="5.0.0"))
    sd = published_state(64, 1, 4, 8, device="meta")
    with pytest.raises(AvaError, match=r"RADIO-T: .*RadioModel, which transformers .* does not have"):
        radio_from_state(sd, published_config(), torch.float32, "RADIO-T")
