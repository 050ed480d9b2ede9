"""Fixtures for the in-memory VFM, the in-memory fingerprint and the training callbacks: a tiny timm ViT built with
random init (the model a user trains), and a small synthetic suite (a few abilities, one with text for the token
path of the linear probe's OCR reader)."""

from __future__ import annotations

from pathlib import Path

import torch

SUITE_ABILITIES = ("color", "counting", "ocr", "spatial")
_SUITES: dict[tuple, Path] = {}


def tiny_vit(seed: int = 0, drop: float = 0.0) -> torch.nn.Module:
    """A 2-block, 64-wide timm ViT at 64 px with 8 px patches (64 patch tokens + CLS), random weights of ``seed``."""
    import timm

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return timm.create_model(
            "vit_tiny_patch16_224",
            pretrained=False,
            img_size=64,
            patch_size=8,
            embed_dim=64,
            depth=2,
            num_heads=2,
            num_classes=4,
            drop_rate=drop,
        )


def tiny_vfm(model: torch.nn.Module, **kw):
    from ava.vfm.module import vfm_from_module

    args = {
        "name": "tiny-vit",
        "size": 64,
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        "output": "blocks.1",
        "prefix_tokens": 1,
        **kw,
    }
    return vfm_from_module(model, **args)


def small_suite(base: Path, per_ava: int = 20, abilities: tuple[str, ...] = SUITE_ABILITIES) -> Path:
    """The synthetic suite of ``abilities`` x ``per_ava`` at 64 px, made once per test session."""
    key = (per_ava, abilities)
    if key not in _SUITES:
        from ava.synth import SynthConfig, generate

        out = base / f"suite-{per_ava}-{len(abilities)}"
        generate(SynthConfig(out=str(out), per_ava=per_ava, ava=list(abilities), size=64, seed=0), progress=False)
        _SUITES[key] = out
    return _SUITES[key]
