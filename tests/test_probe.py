"""Probe heads: GIoU loss, CTC decoding, every answer kind end to end, determinism, run dirs, re-evaluation,
and beating the majority baseline on synthetic data through the real `pixels` extractor and cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ava.abilities import get_ability
from ava.data.format import Dataset
from ava.heads import HEADS
from ava.heads.features import pool_candidates, pool_dim, pool_tokens, token_grid
from ava.heads.probe import ATTN_SPEC, LINEAR_SPEC, AttnProbeConfig, ProbeConfig
from ava.heads.probe.model import box_from_output, box_loss, giou
from ava.heads.probe.ocr import greedy_decode
from ava.heads.probe.train import META_FILE, WEIGHTS_FILE, evaluate, fit_ability, train
from ava.heads.targets import train_samples
from ava.metrics.giou import giou as metric_giou
from tests.helpers import ONE_PER_ANSWER_KIND, PIXEL_ABILITIES, FakeCache, handmade, majority_baseline, positional

torch.set_num_threads(1)


def _predictions(run_dir: Path, split: str = "test") -> list[dict]:
    return [json.loads(line) for line in (run_dir / f"predictions_{split}.jsonl").read_text().splitlines()]


def _values(run_dir: Path, split: str = "test") -> dict[str, float]:
    results = json.loads((run_dir / f"results_{split}.json").read_text())
    return {k: v["value"] for k, v in results["abilities"].items()}


@pytest.fixture()
def fake_cache(monkeypatch: pytest.MonkeyPatch, handmade_data: tuple[Path, FakeCache]) -> tuple[Path, FakeCache]:
    monkeypatch.setattr("ava.cache.open_cache", lambda *a, **k: handmade_data[1])
    return handmade_data


def test_registered() -> None:
    assert HEADS.get("probe-linear") is LINEAR_SPEC and HEADS.get("attentive") is ATTN_SPEC
    assert ATTN_SPEC.config_cls().pooling == "attn" and LINEAR_SPEC.config_cls().pooling == "mean"


def test_giou_loss_matches_metric() -> None:
    rng = np.random.default_rng(0)

    def boxes(n: int) -> np.ndarray:
        xs, ys = np.sort(rng.uniform(0, 1, (n, 2)), axis=1), np.sort(rng.uniform(0, 1, (n, 2)), axis=1)
        return np.stack([xs[:, 0], ys[:, 0], xs[:, 1], ys[:, 1]], 1)

    a, b = boxes(200), boxes(200)
    special = np.array([[0.1, 0.1, 0.3, 0.3], [0.1, 0.1, 0.3, 0.3], [0.0, 0.0, 0.2, 0.2], [0.5, 0.5, 0.9, 0.9]])
    a = np.concatenate([a, special[[0, 2]]])  # identical boxes; disjoint boxes
    b = np.concatenate([b, special[[1, 3]]])
    ours = giou(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    ref = np.array([metric_giou(x, y) for x, y in zip(a, b, strict=True)])
    np.testing.assert_allclose(ours, ref, atol=1e-6)
    assert ours[-2] == pytest.approx(1.0) and ours[-1] < 0
    # the loss is 1 - GIoU + L1, so a perfect prediction has zero loss
    target = torch.tensor([[0.2, 0.3, 0.6, 0.7]])
    logit = lambda p: float(np.log(p / (1 - p)))  # noqa: E731
    out = torch.tensor([[logit(0.4), logit(0.5), logit(0.4), logit(0.4)]], dtype=torch.float64)
    np.testing.assert_allclose(box_from_output(out).numpy(), target.numpy(), atol=1e-6)
    assert float(box_loss(out, target.double())) == pytest.approx(0.0, abs=1e-6)


def test_greedy_ctc_decode() -> None:
    chars = ["a", "b", "c"]
    path = [1, 1, 0, 1, 2, 2, 0, 0, 3]  # a a _ a b b _ _ c -> "aabc"
    log_probs = torch.full((len(path), 1, 4), -10.0)
    log_probs[torch.arange(len(path)), 0, torch.tensor(path)] = 0.0
    assert greedy_decode(log_probs, chars) == ["aabc"]


def test_ctc_reader_mix_is_its_conv1d() -> None:
    """The reader's slot mixing, computed as one matrix product of (previous, own, next) slot features, is the map
    of its ``mix`` Conv1d (kernel 3, padding 1): the same weights, the same saved tensors."""
    from ava.heads.probe.ocr import CTCReader

    reader = CTCReader(16, 9, slots=7, n_chars=5, hidden=12)
    generator = torch.Generator().manual_seed(0)
    reader.mix.weight.data.normal_(generator=generator)
    reader.mix.bias.data.normal_(generator=generator)
    h = torch.randn(3, 7, 12, generator=generator)
    torch.testing.assert_close(reader._mix(h), reader.mix(h.transpose(1, 2)).transpose(1, 2), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_tiny_ocr_probe_reads(tmp_path: Path) -> None:
    root, cache = handmade(tmp_path / "ocr", abilities=("ocr",), n=60, noise=0.2)
    ds, ability = Dataset(root), get_ability("ocr")
    train_set = train_samples(ds, "ocr", None, 0)
    config = ProbeConfig(lrs=[1e-2], epochs=300, batch_size=48, progress=False)
    model, meta = fit_ability(config, ability, train_set, cache, "cpu")
    from ava.heads.probe.train import Task, load_features, predict

    test = ds.samples("ocr", split="test")
    replies = predict(model, Task.from_meta(ability, meta), load_features(cache, test, (None,), True, 1.0), test, "cpu")
    exact = np.mean([r == s.truth["text"] for r, s in zip(replies, test, strict=True)])
    assert exact >= 0.8, list(zip(replies, [s.truth["text"] for s in test], strict=True))


def _train(config_cls: type, data: Path, out: Path, **kw: object) -> Path:
    return train(config_cls(data=str(data), cache="unused", vfm="fake", out=str(out), progress=False, **kw))


@pytest.mark.slow
def test_linear_every_kind_run_dir_and_reevaluation(fake_cache: tuple[Path, FakeCache], tmp_path: Path) -> None:
    data, _ = fake_cache
    run = _train(ProbeConfig, data, tmp_path / "run")
    names = {p.name for p in run.iterdir()}
    assert {"config.json", "run.json", "results_test.json", "predictions_test.jsonl", META_FILE, WEIGHTS_FILE} <= names
    run_info = json.loads((run / "run.json").read_text())
    assert run_info["head"] == "probe-linear" and run_info["random_weights"] is False
    assert run_info["cache_key"] == "fake0001" and sorted(run_info["abilities"]) == sorted(ONE_PER_ANSWER_KIND)
    results = json.loads((run / "results_test.json").read_text())
    assert results["run"]["head"] == "probe-linear" and results["abilities"]["counting"]["extra"]["grid"]
    values = _values(run)
    for ava in ("counting", "abs_depth", "color", "spatial", "scene"):  # features carry the answer
        assert (
            values[ava] < 0.5 * majority_baseline(data, ava)
            if ava in ("counting", "abs_depth", "color")
            else values[ava] >= 0.9
        ), (ava, values[ava])
    assert values["localization"] > 0.3 and values["ocr"] > 0.5
    assert all(p["ok"] for p in _predictions(run))
    before = _predictions(run)
    evaluate(run, "test")
    assert _predictions(run) == before  # reloaded probes predict exactly what training predicted
    train_results = evaluate(run, "train")
    assert train_results["split"]["name"] == "train" and (run / "results_train.json").is_file()


@pytest.mark.slow
def test_attentive_deterministic(fake_cache: tuple[Path, FakeCache], tmp_path: Path) -> None:
    data, _ = fake_cache
    kw = dict(ava=["spatial", "counting"], epochs=15)
    a = _train(AttnProbeConfig, data, tmp_path / "a", **kw)
    b = _train(AttnProbeConfig, data, tmp_path / "b", **kw)
    c = _train(AttnProbeConfig, data, tmp_path / "c", seed=1, **kw)
    assert _predictions(a) == _predictions(b)
    from safetensors.torch import load_file

    wa, wb, wc = (load_file(str(r / WEIGHTS_FILE)) for r in (a, b, c))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)  # another seed, another draw
    assert json.loads((a / "run.json").read_text())["head"] == "probe-attn"


@pytest.mark.slow
def test_streamed_tokens_match_in_memory(fake_cache: tuple[Path, FakeCache], tmp_path: Path) -> None:
    data, _ = fake_cache
    kw = dict(ava=["color", "ocr"], epochs=4)
    memory = _train(AttnProbeConfig, data, tmp_path / "memory", **kw)
    streamed = _train(AttnProbeConfig, data, tmp_path / "streamed", max_memory_gb=1e-9, **kw)
    assert _predictions(memory) == _predictions(streamed)


def test_layer_grid_uses_every_cached_layer(tmp_path: Path) -> None:
    root, cache = handmade(tmp_path / "ml", abilities=("emotion",), n=30, layers=3)
    ds = Dataset(root)
    samples = train_samples(ds, "emotion", None, 0)
    _, meta = fit_ability(ProbeConfig(lrs=[1e-2, 3e-2], epochs=5), get_ability("emotion"), samples, cache, "cpu")
    assert {tuple(g["layers"]) for g in meta["grid"]} == {(-1,), (-3, -2, -1)}
    assert len(meta["grid"]) == 4 and meta["dim"] in (16, 48)


def test_bad_input_is_named(fake_cache: tuple[Path, FakeCache], tmp_path: Path) -> None:
    from ava.errors import AvaError

    data, _ = fake_cache
    with pytest.raises(AvaError, match="emotion"):
        _train(ProbeConfig, data, tmp_path / "x", ava=["emotion"])  # not in this dataset
    with pytest.raises(AvaError, match="run directory"):
        evaluate(tmp_path / "nothing", "test")


class _Shape:
    def __init__(self, num_tokens: int, grid: tuple[int, int] | None = None) -> None:
        self.num_tokens, self.grid, self.dim = num_tokens, grid, 3


def test_pooled_views() -> None:
    from ava.errors import AvaError

    # a 4 x 4 token grid of 2-dim tokens: grid2 = the mean, then the 4 quadrant means (row-major)
    tokens = np.arange(2 * 16 * 2, dtype=np.float32).reshape(2, 16, 2)
    view = pool_tokens(tokens, "grid2", (4, 4))
    x = tokens.reshape(2, 4, 4, 2)
    quads = [x[:, :2, :2], x[:, :2, 2:], x[:, 2:, :2], x[:, 2:, 2:]]
    expected = np.concatenate([tokens.mean(1), *[q.mean((1, 2)) for q in quads]], 1)
    np.testing.assert_allclose(view, expected)
    assert view.shape == (2, pool_dim(2, "grid2")) and pool_dim(768, "grid4") == 17 * 768
    # uneven cells (14 -> 4) follow torch's adaptive average pooling
    t14 = np.random.default_rng(0).normal(size=(3, 196, 5)).astype(np.float32)
    ref = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(t14).reshape(3, 14, 14, 5).permute(0, 3, 1, 2), 4)
    cells = pool_tokens(t14, "grid4", (14, 14))[:, 5:].reshape(3, 16, 5)
    np.testing.assert_allclose(cells, ref.flatten(2).transpose(1, 2).numpy(), atol=1e-5)
    # which views a cache can take: its grid, else a square token count, else the mean only
    assert pool_candidates(_Shape(196, (14, 14)), ["mean", "grid2", "grid4"]) == ["mean", "grid2", "grid4"]
    assert token_grid(_Shape(12, (3, 4))) == (3, 4) and token_grid(_Shape(16)) == (4, 4)
    assert pool_candidates(_Shape(4), ["mean", "grid2", "grid4"]) == ["mean", "grid2"]
    assert pool_candidates(_Shape(6), ["grid2"]) == ["mean"]
    with pytest.raises(AvaError, match="grid-4"):
        pool_candidates(_Shape(4), ["grid-4"])


def test_grid_view_sees_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer that is only a position: chance for the mean view, solved by the grid view the held-out picks;
    the chosen view (and its fixed cell PCA) is saved, reported, and reloaded to the same predictions."""
    data, cache = positional(tmp_path / "pos")
    monkeypatch.setattr("ava.cache.open_cache", lambda *a, **k: cache)
    run = _train(ProbeConfig, data, tmp_path / "grid")
    mean_only = _train(ProbeConfig, data, tmp_path / "mean", pools=["mean"])
    results = json.loads((run / "results_test.json").read_text())["abilities"]["spatial"]
    assert results["extra"]["pool"] == "grid4" and {g["pool"] for g in results["extra"]["grid"]} == {"mean", "grid4"}
    assert results["value"] >= 0.8 and _values(mean_only)["spatial"] <= 0.5, (results["value"], _values(mean_only))
    meta = json.loads((run / META_FILE).read_text())["spatial"]
    assert meta["cells"] == 4 and meta["rank"] == 8 and meta["dim"] == 8
    before = _predictions(run)
    evaluate(run, "test")
    assert _predictions(run) == before
    from ava.errors import AvaError

    with pytest.raises(AvaError, match="pooling 'cells'"):
        _train(ProbeConfig, data, tmp_path / "bad", pools=["cells"])


@pytest.mark.parametrize("block_cells", [1, 7, 48])
def test_cell_pca_in_float64_blocks_is_the_whole_covariance(monkeypatch: pytest.MonkeyPatch, block_cells: int) -> None:
    """A grid view's cell PCA sums its covariance over blocks of at most COV_CELLS cells (bounded memory at real
    sizes): the same basis and prepared rows as one block over every cell (one sample per block, several, and a
    block that does not divide the rows), with two layers; one block is bitwise the computation before."""
    from ava.heads.probe import model

    torch.manual_seed(0)
    cells, dim, layers = 3, 10, 2
    scale = torch.linspace(0.2, 3.0, dim)  # distinct variances: a well-separated spectrum
    x = (torch.randn(23, layers, 1 + cells**2, dim) * scale + 0.7).reshape(23, -1)

    def fitted() -> model.Probe:
        probe = model.Probe(dim * layers, 3, "mean", cells=cells, layers=layers, rank=4)
        probe.fit_input(x)
        return probe

    whole = fitted()
    flat = x.double().reshape(23, layers, 1 + cells**2, dim)[:, 0, 1:].reshape(-1, dim)  # the computation before
    flat = flat - flat.mean(0)
    vectors = torch.linalg.eigh(flat.T @ flat / len(flat))[1][:, -4:].flip(-1)
    before = (vectors * torch.where(vectors.sum(0) < 0, -1.0, 1.0)).float()
    assert torch.equal(whole.reduce.basis[0], before)
    monkeypatch.setattr(model, "COV_CELLS", block_cells)
    blocked = fitted()
    torch.testing.assert_close(blocked.reduce.basis, whole.reduce.basis, rtol=0, atol=1e-6)
    torch.testing.assert_close(blocked.prepare(x), whole.prepare(x), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_pixels_beat_majority(tmp_path_factory: pytest.TempPathFactory, pixel_suite: tuple[Path, Path]) -> None:
    """Raw pixel patches through the real synth -> extract -> cache path (what the issue asks of the probes).

    Spatial relations and counts are in *where* things are: the linear probe sees them through its grid-cell
    views (the mean over the image alone is at chance on spatial). Scene and depth classes differ in overall
    colour, which the mean keeps. The colour inside the red box needs a gate on where the box is, which no
    linear function of pooled pixels has: the attentive probe finds it (and the count too)."""
    data, cache = pixel_suite
    out = tmp_path_factory.mktemp("probe_pixels")
    common_kw = dict(data=str(data), cache=str(cache), vfm="pixels", progress=False)
    lin = train(ProbeConfig(out=str(out / "lin"), ava=["scene", "abs_depth", "spatial", "counting"], **common_kw))
    attn = train(AttnProbeConfig(out=str(out / "attn"), ava=["color", "counting"], **common_kw))
    linear, attentive = _values(lin), _values(attn)
    base = {ava: majority_baseline(data, ava) for ava in PIXEL_ABILITIES}
    assert linear["scene"] > base["scene"] + 0.5, (linear, base)
    assert linear["abs_depth"] < 0.7 * base["abs_depth"], (linear, base)
    # 4 balanced answers, 40 test samples: 0.25 is chance, > 0.4 is p < 0.02 under it
    assert linear["spatial"] > base["spatial"] + 0.15, (linear, base)
    pools = json.loads((lin / "results_test.json").read_text())["abilities"]["spatial"]["extra"]["pool"]
    assert pools.startswith("grid"), pools
    assert linear["counting"] < 0.85 * base["counting"], (linear, base)
    assert attentive["color"] < 0.9 * base["color"], (attentive, base)
    assert attentive["counting"] < 0.9 * base["counting"], (attentive, base)


@pytest.mark.parametrize("fused", [None, False])
def test_grid_adamw_is_torch_adamw_per_member(fused: bool | None) -> None:
    """GridAdamW on stacked members = torch.optim.AdamW with one parameter group per member (same schedule): with
    torch's fused kernel, once per learning rate (members 0 and 3 share one, in rows apart), and with the foreach
    ops."""
    from ava.heads.probe.grid import GridAdamW

    gen = torch.Generator().manual_seed(0)
    start = torch.randn(4, 4, 5, generator=gen)
    grads = [torch.randn(4, 4, 5, generator=gen) for _ in range(6)]
    lrs, factors = [1e-3, 1e-2, 3e-2, 1e-3], [1.0, 0.9, 0.5, 0.3, 0.1, 0.0]
    stacked = torch.nn.Parameter(start.clone())
    ours = GridAdamW([(stacked, torch.tensor(lrs))], weight_decay=1e-2, fused=fused)
    assert ours.fused == (fused is None)  # (this torch has the fused kernel on the CPU)
    members = [torch.nn.Parameter(start[g].clone()) for g in range(4)]
    ref = torch.optim.AdamW([{"params": [m], "lr": lr} for m, lr in zip(members, lrs, strict=True)], weight_decay=1e-2)
    for grad, factor in zip(grads, factors, strict=True):
        stacked.grad = grad.clone()
        ours.step(factor)
        for g, (m, group) in enumerate(zip(members, ref.param_groups, strict=True)):
            m.grad = grad[g].clone()
            group["lr"] = lrs[g] * factor
        ref.step()
    torch.testing.assert_close(stacked.detach(), torch.stack([m.detach() for m in members]), rtol=1e-6, atol=1e-7)


def test_stacked_grids_compute_each_member() -> None:
    """The stacked trainers give each member's own output, and write their trained values back into the members."""
    from ava.heads.probe.grid import StackedAttentive, StackedLinears
    from ava.heads.probe.model import Probe, ProbeGrid

    gen = torch.Generator().manual_seed(0)
    lin = [Probe(d, 3, "mean") for d in (4, 4, 6)]
    for m in lin:
        m.init_weights(gen)
    stack = StackedLinears(lin, [slice(0, 4), slice(0, 4), slice(4, 10)])
    z = torch.randn(5, 10, generator=gen)
    out = stack(z)
    for g, (m, sl) in enumerate(zip(lin, (slice(0, 4), slice(0, 4), slice(4, 10)), strict=True)):
        torch.testing.assert_close(out[g], m.linear(z[:, sl]))
    with torch.no_grad():
        stack.weights[1].add_(1.0)
    stack.write_back()
    torch.testing.assert_close(lin[2].linear.weight, stack.weights[1][0])
    grid = ProbeGrid(6, 3, 2, "attn", 2, 4, (2, 2), gen)
    with torch.no_grad():
        for m in grid.members:
            m.query.normal_(generator=gen)
            m.pos_bias.normal_(generator=gen)
    x = torch.randn(5, 4, 6, generator=gen)
    grid.fit_norm(x)
    attn = StackedAttentive(list(grid.members))
    out = attn(grid.members[0].norm(x))
    for g, m in enumerate(grid.members):
        torch.testing.assert_close(out[g], m(x), rtol=1e-5, atol=1e-6)


def test_a_views_transforms_go_to_the_gpu_only_where_they_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The linear probe's fixed transforms run on the GPU when the view and ~2 more of its size fit in 70% of the free
    device memory, else on the host; a CPU run keeps them on the host."""
    from ava.cache import placement
    from ava.heads.probe.train import transforms_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(placement, "device_free_bytes", lambda device: 10_000)
    monkeypatch.setattr(placement, "host_free_bytes", lambda: 10**12)
    assert transforms_device("cuda:0", 2_000) == "cuda:0"  # 6,000 of the 7,000 it may take
    assert transforms_device("cuda:0", 2_500) == "cpu"  # 7,500: the host
    assert transforms_device("cpu", 10) == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the host's waits on a GPU")
@pytest.mark.parametrize("config_cls", [ProbeConfig, AttnProbeConfig])
def test_a_probes_steps_never_wait_for_the_gpu(
    fake_cache: tuple[Path, FakeCache], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config_cls: type
) -> None:
    """A probe's training loop on a GPU (a batch's rows gathered there, the stacked members' forward and backward,
    the grid's update) queues its steps without waiting for them: fewer waiting calls than epochs (the loop's setup
    copies a few things to the device), where a wait per step would make one per step (CUDA's sync debug mode, on
    the training thread)."""
    import threading

    from ava.heads.probe import train as probe_train
    from tests.helpers import noted_waits

    data, _ = fake_cache
    real, runs = probe_train.train_grid, []

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        waits: list[tuple[str, str]] = []
        steps = kwargs["epochs"] * -(-len(args[2]) // kwargs["batch_size"])
        with noted_waits(waits):
            real(*args, **kwargs)
        runs.append((steps, kwargs["epochs"], [w for w in waits if w[0] == threading.current_thread().name]))

    monkeypatch.setattr(probe_train, "train_grid", counted)
    _train(config_cls, data, tmp_path / "run", ava=["spatial", "counting"], epochs=20, batch_size=4, device="cuda")
    assert runs and all(steps >= 3 * epochs for steps, epochs, _ in runs), runs
    assert all(len(waits) < epochs for _, epochs, waits in runs), runs
