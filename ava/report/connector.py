"""The connector probe (the AVA-Bench paper, section 6: DINOv2 fine-grained 66.3% on its raw features, 25.67% after
the connector): the same linear probe (and kNN) trained on an LLM head's connector outputs and on the raw VFM
features it was given, per ability. Where the connector's outputs score lower, the LLM head lost the ability in the
connector, not in the VFM.

``ava head probe-connector --run LLM_RUN``: the run's cached tokens (its VFM, cache, layer, data, abilities) are read
once; the raw tokens and the connector's outputs (``RUN/connector.safetensors``, ``mlp2x_gelu``) are pooled into the
views the probes read (mean, 2x2 and 4x4 cells) and held in memory; both are fingerprinted by the same code as ``ava
fingerprint`` (:func:`ava.heads.ability_runs.train_abilities`), in temporary run directories.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ava.errors import AvaError

DEFAULT_HEADS = ("probe-linear",)


@dataclass
class ConnectorProbe:
    """``scores[side][head][ability]`` with side ``raw`` or ``connector``; ``higher_is_better[ability]``."""

    run: str
    vfm: str
    scores: dict[str, dict[str, dict[str, float]]]
    higher_is_better: dict[str, bool]
    metrics: dict[str, str]
    dims: dict[str, int] = field(default_factory=dict)  # side -> feature width

    def rows(self) -> list[list[str]]:
        """ability, metric, then raw and connector value per head, and the change."""
        out = []
        for head in self.scores["raw"]:
            for ab, raw in self.scores["raw"][head].items():
                con = self.scores["connector"][head][ab]
                out.append([ab, head, self.metrics[ab], f"{raw:.4f}", f"{con:.4f}", f"{con - raw:+.4f}"])
        return out


def _load_connector(run_dir: Path) -> Any:
    import torch
    from safetensors.torch import load_file

    from ava.heads.llm.model import Connector

    path = run_dir / "connector.safetensors"
    if not path.is_file():
        raise AvaError(f"{run_dir} has no connector.safetensors: not a finished LLM-head run")
    state = load_file(str(path))
    if "0.weight" not in state:
        raise AvaError(f"{path}: no key '0.weight'; not an mlp2x_gelu connector ava wrote")
    llm_dim, vfm_dim = state["0.weight"].shape
    connector = Connector(int(vfm_dim), int(llm_dim))
    connector.load_state_dict(state)
    return connector.eval().to(torch.float32)


def _fill(side: str, vfm: str, grid: tuple[int, int], layer: int, tokens_dim: int, random_weights: bool) -> Any:
    from ava.cache.pooling import STORED_VIEWS
    from ava.heads.memory import MemoryFeatures

    spec = SimpleNamespace(
        spec=SimpleNamespace(key=f"{vfm} ({side})"),
        random_weights=random_weights,
        num_tokens=grid[0] * grid[1],
        dim=tokens_dim,
        grid=grid,
        layers=(layer,),
    )
    return MemoryFeatures(spec, STORED_VIEWS)


def probe_connector(
    run_dir: str | os.PathLike[str], *, heads: tuple[str, ...] = DEFAULT_HEADS, device: str = "cpu", chunk: int = 128
) -> ConnectorProbe:
    """The same probes on an LLM-head run's raw features and on its connector's outputs (module docstring)."""
    import torch

    from ava.cache import open_cache
    from ava.cache.pooling import pool_tokens
    from ava.heads.features import read_rows
    from ava.heads.memory import EvalSuite
    from ava.heads.rundir import read_run

    path = Path(run_dir)
    config, run = read_run(path, "llm")
    connector = _load_connector(path)
    cache = open_cache(config["cache"], config["vfm"], key=run.get("cache_key"))
    suite = EvalSuite(
        config["data"],
        run["abilities"],
        split=config.get("split", "test"),
        max_train=config.get("max_train"),
        seed=int(config.get("seed", 0)),
    )
    grid = tuple(int(g) for g in cache.grid)
    layer = config.get("layer")
    layer_index = int(layer if layer is not None else cache.layers[0])
    random = bool(getattr(cache, "random_weights", False))
    sides = {
        "raw": _fill("raw", config["vfm"], grid, layer_index, int(cache.dim), random),
        "connector": _fill("connector", config["vfm"], grid, layer_index, int(connector[0].out_features), random),
    }
    shas = suite.shas()
    views: dict[str, dict[str, list[np.ndarray]]] = {s: {v: [] for v in f.views} for s, f in sides.items()}
    for start in range(0, len(shas), chunk):
        batch = [suite.images[s] for s in shas[start : start + chunk]]
        raw = read_rows(cache, batch, layer, pooled=False).astype(np.float32)
        with torch.inference_mode():
            con = connector(torch.from_numpy(raw)).numpy()
        for side, tokens in (("raw", raw), ("connector", con)):
            for v in sides[side].views:
                views[side][v].append(pool_tokens(tokens, v, grid))
    for side, feats in sides.items():
        feats.fill(
            shas,
            {v: np.concatenate(rows) for v, rows in views[side].items()},
            [],
            np.zeros((0, feats.num_tokens, feats.dim), np.float16),
        )
    return _fingerprints(path, config["vfm"], suite, sides, heads, device)


def _fingerprints(
    path: Path, vfm: str, suite: Any, sides: dict[str, Any], heads: tuple[str, ...], device: str
) -> ConnectorProbe:
    from ava.heads.ability_runs import train_abilities
    from ava.heads.features import resolve_device
    from ava.heads.memory import check_heads, make_runs

    names = check_heads(heads)
    if "probe-attn" in names:
        raise AvaError("the connector probe compares pooled views (probe-linear, knn); probe-attn reads tokens")
    device = resolve_device(device)
    scores: dict[str, dict[str, dict[str, float]]] = {}
    hib: dict[str, bool] = {}
    metrics: dict[str, str] = {}
    for side, feats in sides.items():
        with tempfile.TemporaryDirectory(prefix="ava-connector-") as tmp:
            runs = make_runs(f"{vfm} ({side})", suite, feats, names, Path(tmp), device, suite.seed)
            train_abilities(runs, feats, suite.abilities, device=device, progress=False, label=side)
            results = {run.head: run.finish() for run in runs}
        scores[side] = {h: {a: r["value"] for a, r in res["abilities"].items()} for h, res in results.items()}
        for res in results.values():
            for a, r in res["abilities"].items():
                hib[a], metrics[a] = bool(r["higher_is_better"]), str(r["metric"])
    return ConnectorProbe(str(path), vfm, scores, hib, metrics, {s: f.dim for s, f in sides.items()})
