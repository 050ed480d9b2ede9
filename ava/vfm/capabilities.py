"""What a named VFM offers the heads, decided by the VFM layer from the name's route and its resolved spec,
without loading a model.

The heads ask through :func:`require` alone and know no VFM family, so a new family (a plugin's) needs no edit in
:mod:`ava.heads`:

- ``features``: patch tokens for the feature cache (extraction, the probes, kNN, the LLM head). Every name that
  resolves to a :class:`~ava.vfm.spec.VFMSpec` offers them; the ``open_clip:`` route (pooled image-text embeddings
  only) does not.
- ``text-tower``: labels embedded against images (the zero-shot head, the ``clip@`` option miner): a checkpoint
  whose class carries a text tower (:func:`ava.vfm.image_text.text_tower_source`).
"""

from __future__ import annotations

from ava.errors import AvaError

FEATURES = "features"
TEXT_TOWER = "text-tower"
CAPABILITIES = (FEATURES, TEXT_TOWER)


def require(name: str, capability: str) -> None:
    """Return when the VFM ``name`` offers ``capability``; else raise the one-line :class:`AvaError` that says what
    the name serves and what to use instead."""
    if capability == FEATURES:
        from ava.vfm.openclip import is_open_clip, no_features

        if is_open_clip(name):
            raise no_features(name)
    elif capability == TEXT_TOWER:
        from ava.vfm.image_text import text_tower_source

        text_tower_source(name)
    else:
        raise ValueError(f"unknown VFM capability {capability!r}; known: {', '.join(CAPABILITIES)}")


def offers(name: str, capability: str) -> bool:
    """Whether the VFM ``name`` offers ``capability`` (:func:`require` without the error)."""
    try:
        require(name, capability)
    except AvaError:
        return False
    return True
