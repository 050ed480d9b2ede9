"""`ava fingerprint` and per-ability training: one read per ability shared by the three heads, the same scores as
the heads trained one by one, resume after an interruption, NaN/inf features refused by sample, and the CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ava.errors import AvaError
from ava.heads.ability_runs import RECORDS_DIR
from ava.heads.features import AbilityFeatures
from ava.heads.fingerprint import FingerprintConfig, fingerprint, run_dir_name
from ava.heads.knn import KNNConfig
from ava.heads.knn.train import train as knn_train
from ava.heads.probe import AttnProbeConfig, ProbeConfig
from ava.heads.probe.train import ProbeRun
from ava.heads.probe.train import train as probe_train
from tests.helpers import FakeCache, handmade

torch.set_num_threads(1)
KINDS = ("counting", "color", "spatial")
HEADS = ("probe-linear", "probe-attn", "knn")


class CountingCache(FakeCache):
    """A FakeCache that counts its reads of token rows."""

    def __init__(self, rows: dict[str, np.ndarray], **kw: object) -> None:
        super().__init__(rows, **kw)  # type: ignore[arg-type]
        self.reads = 0

    def read(self, shas: list[str], layer: int | None = None) -> np.ndarray:
        self.reads += 1
        return super().read(shas, layer)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FakeCache]:
    return handmade(tmp_path_factory.mktemp("fp") / "data", abilities=KINDS, n=40)


@pytest.fixture()
def cache(monkeypatch: pytest.MonkeyPatch, data: tuple[Path, FakeCache]) -> CountingCache:
    counting = CountingCache(data[1].rows, layers=data[1].layers, key=data[1].key)
    monkeypatch.setattr("ava.cache.open_cache", lambda *a, **k: counting)
    return counting


def _config(data: Path, out: Path, **kw: object) -> FingerprintConfig:
    return FingerprintConfig(vfm="fake", data=str(data), cache="unused", out=str(out), progress=False, **kw)


def _values(run_dir: Path) -> dict[str, float]:
    results = json.loads((run_dir / "results_test.json").read_text())
    return {k: v["value"] for k, v in results["abilities"].items()}


@pytest.mark.slow
def test_one_read_per_ability_and_same_scores_as_each_head_alone(
    data: tuple[Path, FakeCache], cache: CountingCache, tmp_path: Path
) -> None:
    root = data[0]
    result = fingerprint(_config(root, tmp_path / "fp", jobs=2))  # two heads fitted at once, on threads
    assert result.reads == dict.fromkeys(KINDS, 1) and cache.reads == len(KINDS)  # tokens read once, all heads
    alone = {
        "probe-linear": probe_train(
            ProbeConfig(vfm="fake", data=str(root), cache="x", out=str(tmp_path / "lin"), progress=False)
        ),
        "probe-attn": probe_train(
            AttnProbeConfig(vfm="fake", data=str(root), cache="x", out=str(tmp_path / "attn"), progress=False)
        ),
        "knn": knn_train(KNNConfig(vfm="fake", data=str(root), cache="x", out=str(tmp_path / "knn"), progress=False)),
    }
    for head in HEADS:
        run = result.run_dirs[head]
        assert run == tmp_path / "fp" / run_dir_name(head, "fake")
        assert json.loads((run / "run.json").read_text())["head"] == head
        assert _values(run) == _values(alone[head]), head  # the same numbers, not just close
        preds = (run / "predictions_test.jsonl").read_text()
        assert preds == (alone[head] / "predictions_test.jsonl").read_text()
    meta = json.loads((result.run_dirs["knn"] / "knn.json").read_text())
    assert set(meta) == set(KINDS) and (result.run_dirs["knn"] / "knn" / "color.faiss").is_file()
    assert set(json.loads((result.run_dirs["probe-attn"] / "probe.json").read_text())) == set(KINDS)


def test_jobs_must_be_positive(data: tuple[Path, FakeCache], cache: CountingCache, tmp_path: Path) -> None:
    with pytest.raises(AvaError, match="--jobs must be >= 1, got 0"):
        fingerprint(_config(data[0], tmp_path / "fp", jobs=0))
    assert not (tmp_path / "fp").exists()


def test_default_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two heads at once on a GPU and on a CPU with 2+ cores; one where there is one head, or one core."""
    import ava.heads.ability_runs as ar

    monkeypatch.setattr(ar.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert (ar.default_jobs("cuda", 3), ar.default_jobs("cuda:1", 2), ar.default_jobs("cpu", 3)) == (2, 2, 2)
    assert (ar.default_jobs("cuda", 1), ar.default_jobs("cpu", 1)) == (1, 1)
    monkeypatch.setattr(ar.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert (ar.default_jobs("cpu", 3), ar.default_jobs("cuda", 3), ar.default_jobs("mps", 3)) == (1, 2, 1)


@pytest.mark.slow
def test_interrupted_fingerprint_redoes_only_unfinished_abilities(
    data: tuple[Path, FakeCache], cache: CountingCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ava.data.format import Dataset

    root, out = data[0], tmp_path / "fp"
    first, last = Dataset(root).abilities()[:2], Dataset(root).abilities()[2]
    config = _config(root, out, heads=["probe-linear", "knn"], jobs=1)  # one fit at a time: knn stops with it
    fitted: list[str] = []
    real = ProbeRun.fit_ability

    def stop_at_last(self, ava, features, on_step):  # noqa: ANN001, ANN202
        if ava == last:
            raise KeyboardInterrupt
        fitted.append(ava)
        return real(self, ava, features, on_step)

    monkeypatch.setattr(ProbeRun, "fit_ability", stop_at_last)
    with pytest.raises(KeyboardInterrupt):
        fingerprint(config)
    assert fitted == first
    records = out / run_dir_name("probe-linear", "fake") / RECORDS_DIR
    assert sorted(p.name for p in records.glob("*.json")) == sorted(f"{a}.json" for a in first)
    assert not (out / run_dir_name("probe-linear", "fake") / "results_test.json").exists()

    def count(self, ava, features, on_step):  # noqa: ANN001, ANN202
        fitted.append(ava)
        return real(self, ava, features, on_step)

    monkeypatch.setattr(ProbeRun, "fit_ability", count)
    fitted.clear()
    cache.reads = 0
    result = fingerprint(config)
    assert fitted == [last] and result.reads == {first[0]: 0, first[1]: 0, last: 1}
    assert result.resumed == {"probe-linear": sorted(first), "knn": sorted(first)}
    fresh = fingerprint(_config(root, tmp_path / "fresh", heads=["probe-linear", "knn"]))
    for head in ("probe-linear", "knn"):
        assert _values(result.run_dirs[head]) == _values(fresh.run_dirs[head])
    # another config (seed) into the same runs is refused by the run-dir owner (ava.heads.rundir), naming the field
    with pytest.raises(AvaError, match="seed"):
        fingerprint(_config(root, out, heads=["probe-linear"], seed=1))


@pytest.mark.slow
def test_head_train_resumes_per_ability(
    data: tuple[Path, FakeCache], cache: CountingCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ava.heads.knn.train import KNNRun

    config = KNNConfig(vfm="fake", data=str(data[0]), cache="x", out=str(tmp_path / "knn"), progress=False)
    real, seen = KNNRun.fit_ability, []

    def flaky(self, ava, features, on_step):  # noqa: ANN001, ANN202
        seen.append(ava)
        if ava == "color" and seen.count("color") == 1:
            raise RuntimeError("killed")
        return real(self, ava, features, on_step)

    monkeypatch.setattr(KNNRun, "fit_ability", flaky)
    with pytest.raises(RuntimeError):
        knn_train(config)
    knn_train(config)
    from ava.data.format import Dataset

    order = Dataset(data[0]).abilities()
    i = order.index("color")
    assert seen == [*order[: i + 1], *order[i:]]  # the abilities before color are not built again
    assert set(_values(tmp_path / "knn")) == set(KINDS)


def test_nan_features_are_refused_naming_the_samples(
    data: tuple[Path, FakeCache], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ava.data.format import Dataset

    root, fake = data
    bad = Dataset(root).samples("color", split="train")[3]
    rows = {k: v.copy() for k, v in fake.rows.items()}
    rows[bad.image_sha256][0, 2, 5] = np.nan
    monkeypatch.setattr("ava.cache.open_cache", lambda *a, **k: FakeCache(rows, layers=fake.layers))
    with pytest.raises(AvaError, match=f"NaN or inf.*color/{bad.id}"):
        fingerprint(_config(root, tmp_path / "nan", ava=["color"]))
    rows[bad.image_sha256][0, 2, 5] = np.inf
    with pytest.raises(AvaError, match=f"color/{bad.id}"):
        probe_train(
            ProbeConfig(vfm="fake", data=str(root), cache="x", out=str(tmp_path / "p"), ava=["color"], progress=False)
        )


def test_ability_features_hold_cache_precision_and_pool_once(data: tuple[Path, FakeCache]) -> None:
    from ava.data.format import Dataset
    from ava.heads.features import read_pooled_views

    root, fake = data
    samples = Dataset(root).samples("counting")
    counting = CountingCache(fake.rows, layers=fake.layers)
    feats = AbilityFeatures(counting, samples, [None])
    shas = [s.image_sha256 for s in samples[:7]]
    np.testing.assert_array_equal(feats.read(shas), fake.read(shas))
    views = read_pooled_views(feats, samples[:7], [None], ["mean"])
    np.testing.assert_array_equal(views["mean"], fake.read(shas).mean(1))
    again = read_pooled_views(feats, samples[2:4], [None], ["mean"])
    np.testing.assert_array_equal(again["mean"], views["mean"][2:4])
    assert counting.reads == 1  # one read at load; views are pooled from memory
    with pytest.raises(AvaError, match="not loaded"):
        feats.read(["0" * 64])


def test_held_rows_gather_what_read_returns(tmp_path: Path) -> None:
    from ava.data.format import Dataset

    root, fake = handmade(tmp_path / "ml", abilities=("emotion",), n=12, layers=3)
    samples = Dataset(root).samples("emotion")
    feats = AbilityFeatures(fake, samples, [-3, -1])
    asked = [samples[4], samples[0], samples[4], samples[7]]  # out of order, one sample twice
    rows = feats.held_rows(asked, (-3, -1), "cpu")
    want = np.concatenate([fake.read([s.image_sha256 for s in asked], la) for la in (-3, -1)], -1)
    np.testing.assert_array_equal(rows[np.arange(4)].numpy(), want)
    np.testing.assert_array_equal(rows[np.array([2, 1])].numpy(), want[[2, 1]])
    np.testing.assert_array_equal(rows.materialize(chunk=3).numpy(), want)  # chunk by chunk, the same rows
    doubled = rows.mapped(lambda x: x.mul_(2)).mapped(lambda x: x.add_(1))  # transforms apply in order, per batch
    np.testing.assert_array_equal(doubled[np.array([3])].numpy(), want[[3]] * 2 + 1)
    np.testing.assert_array_equal(rows[np.array([3])].numpy(), want[[3]])  # the held rows are not touched
    stranger = dataclasses.replace(samples[0], image=f"00/{'0' * 64}.png")
    with pytest.raises(AvaError, match="no features for 1 sample"):
        feats.held_rows([*asked, stranger], (-1,), "cpu")


@pytest.mark.parametrize("max_memory_gb", [4.0, 1e-9])  # held whole in float32, and gathered batch by batch
def test_token_heads_gather_held_rows_not_host_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_memory_gb: float
) -> None:
    """The attentive probe and the CTC reader take an ability's tokens where they are held (on a GPU: on the GPU),
    never through AbilityFeatures.read, which copies rows to the host in float32."""
    root, fake = handmade(tmp_path / "data", abilities=("spatial", "ocr"), n=20)
    monkeypatch.setattr("ava.cache.open_cache", lambda *a, **k: fake)

    def no_host_copy(self: AbilityFeatures, *a: object, **k: object) -> None:
        raise AssertionError("token rows were copied to the host through AbilityFeatures.read")

    monkeypatch.setattr(AbilityFeatures, "read", no_host_copy)
    run = probe_train(
        AttnProbeConfig(
            vfm="fake",
            data=str(root),
            cache="x",
            out=str(tmp_path / "attn"),
            progress=False,
            epochs=2,
            max_memory_gb=max_memory_gb,
        )
    )
    assert set(_values(run)) == {"spatial", "ocr"}  # the attentive probe, and the CTC reader for OCR


def test_cli(data: tuple[Path, FakeCache], cache: CountingCache, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ava.cli.main import app

    out = tmp_path / "runs"
    args = ["fingerprint", "--vfm", "fake", "--data", str(data[0]), "--cache", "x", "--out", str(out), "-q"]
    result = CliRunner().invoke(app, [*args, "--ava", "color,counting", "--head", "knn,probe-linear"])
    assert result.exit_code == 0, result.output
    assert "fingerprint of fake" in result.output and "probe-linear" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["knn-fake", "probe-linear-fake"]
    result = CliRunner().invoke(app, [*args, "--head", "llm"])
    assert result.exit_code != 0 and "cannot be part of a fingerprint" in str(result.exception or result.output)
