"""Heads trained on frozen VFM features. Registered lazily: importing this does not import torch."""

from ava.heads.base import HeadSpec
from ava.registry import Plugins, Registry

# Plugins: an ``ava.heads`` entry point gives a HeadSpec, a list of them, or a callable returning either (README).
HEADS: Registry[HeadSpec] = Registry("head", Plugins("ava.heads", HeadSpec, name=lambda spec: spec.name))
HEADS.register("llm", "ava.heads.llm:SPEC")
HEADS.register("probe-linear", "ava.heads.probe:LINEAR_SPEC", aliases=("linear",))
HEADS.register("probe-attn", "ava.heads.probe:ATTN_SPEC", aliases=("attentive",))
HEADS.register("knn", "ava.heads.knn:SPEC")
HEADS.register("zero-shot", "ava.heads.zero_shot:SPEC", aliases=("zeroshot",))

__all__ = ["HEADS", "HeadSpec"]
