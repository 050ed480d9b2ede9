"""kNN head: voting and averaging rules, k selection, run dirs, re-evaluation, determinism, and beating the
majority baseline through the real `pixels` extractor and cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ava.abilities import get_ability
from ava.data.format import Sample
from ava.errors import AvaError
from ava.heads import HEADS
from ava.heads.knn import SPEC, KNNConfig
from ava.heads.knn.model import Memory, build_index, search
from ava.heads.knn.train import INDEX_DIR, META_FILE, _without_self, candidate_ks, evaluate, train
from tests.helpers import ONE_PER_ANSWER_KIND, Cli, FakeCache, majority_baseline, positional


def _sample(ava: str, options: list[str] | None = None, **truth: object) -> Sample:
    return Sample(
        id="q",
        ava=ava,
        image="00/00.png",
        width=10,
        height=10,
        question="?",
        answer="",
        truth=dict(truth),
        options=options,
    )


def _predictions(run_dir: Path, split: str = "test") -> list[dict]:
    return [json.loads(line) for line in (run_dir / f"predictions_{split}.jsonl").read_text().splitlines()]


def test_registered_and_ks() -> None:
    assert HEADS.get("knn") is SPEC and SPEC.config_cls is KNNConfig
    assert candidate_ks(None) == [1, 5, 20] and candidate_ks(3) == [3] and candidate_ks([20, 1, 5, 5]) == [1, 5, 20]
    with pytest.raises(AvaError):
        candidate_ks([0])


def test_vote_majority_tie_break_and_question_options() -> None:
    ability = get_ability("scene")
    memory = Memory(ability, labels=["beach", "forest", "forest", "beach", "desert", "city"])
    query = _sample("scene", options=["beach", "forest", "city"], index=0, text="beach")
    ids = np.array([0, 1, 2, 3, 4, 5])
    # k=4: beach 2 votes (0.9 + 0.5), forest 2 votes (0.8 + 0.7): a tie, broken by the summed similarity
    sims = np.array([0.9, 0.8, 0.7, 0.5, 0.45, 0.4])
    assert memory.reply(query, sims, ids, 4) == "forest"
    sims = np.array([0.95, 0.8, 0.7, 0.65, 0.45, 0.4])
    assert memory.reply(query, sims, ids, 4) == "beach"
    # "desert" is not an option of this question: it is skipped, the next allowed neighbour counts instead
    sims = np.array([0.3, 0.2, 0.1, 0.05, 0.99, 0.0])
    order = np.argsort(-sims)
    assert memory.reply(query, sims[order], ids[order], 1) == "beach"
    # no allowed neighbour at all: a reply is still one of the question's options
    only_desert = Memory(ability, labels=["desert"])
    assert only_desert.reply(query, np.array([0.9]), np.array([0]), 5) in query.options


def test_batched_replies_equal_the_per_sample_rule() -> None:
    """``Memory.replies`` (votes and weighted means as array operations) gives, for every query, what ``reply``
    gives: random neighbour lists with padding (-1), labels outside a question's options, and ties."""
    rng = np.random.default_rng(0)
    scene = ["beach", "forest", "city", "desert", "lake"]
    cases = {
        "scene": Memory(get_ability("scene"), labels=[str(rng.choice(scene)) for _ in range(30)]),
        "ocr": Memory(get_ability("ocr"), labels=[f"w{i}" for i in range(30)]),
        "counting": Memory(get_ability("counting"), targets=np.log(rng.integers(1, 9, (30, 1)).astype(float))),
        "color": Memory(get_ability("color"), targets=rng.uniform(0, 1, (30, 3))),
        "localization": Memory(get_ability("localization"), targets=np.sort(rng.uniform(0, 1, (30, 4)), 1)),
    }
    for ava, memory in cases.items():
        queries = [
            _sample(
                ava,
                options=list(rng.choice(scene, 3, replace=False)),
                index=0,
                text="beach",
                value=2,
                rgb=[1, 2, 3],
                box=[0, 0, 1, 1],
            )
            for _ in range(40)
        ]
        ids = np.stack([rng.permutation(30)[:12] for _ in queries])
        sims = -np.sort(-np.round(rng.uniform(-1, 1, ids.shape), 1), axis=1).astype(np.float32)  # ties
        ids[::7, 9:] = -1  # fewer neighbours than asked for
        other = np.where(ids >= 0, (ids + 7) % 30, -1)  # other neighbours for the same queries: nothing reused
        for k, found in ((1, ids), (4, ids), (20, ids), (4, other), (1, ids)):
            batched = memory.replies(queries, sims, found, k)
            single = [memory.reply(q, sims[i], found[i], k) for i, q in enumerate(queries)]
            if ava == "localization":  # full-precision floats: equal up to the order of a sum of k terms
                np.testing.assert_allclose(
                    [json.loads(r) for r in batched], [json.loads(r) for r in single], rtol=1e-12
                )
            else:
                assert batched == single, (ava, k)


def test_weighted_mean_and_ocr_nearest() -> None:
    counting = get_ability("counting")
    memory = Memory(counting, targets=np.log(np.array([[2.0], [8.0], [100.0]])))
    query = _sample("counting", value=3)
    # equal similarities: the geometric mean of 2 and 8
    assert memory.reply(query, np.array([0.5, 0.5]), np.array([0, 1]), 2) == "4"
    # a much nearer neighbour dominates the inverse-distance weights
    assert memory.reply(query, np.array([0.9999, 0.1, 0.1]), np.array([1, 0, 2]), 3) == "8"
    ocr = Memory(get_ability("ocr"), labels=["stop", "exit"])
    assert ocr.reply(_sample("ocr", text="x"), np.array([0.2, 0.9]), np.array([1, 0]), 20) == "exit"


def test_index_is_cosine() -> None:
    x = np.array([[1.0, 0.0], [0.0, 3.0], [1.0, 1.0]], np.float32)
    sims, ids = search(build_index(x), np.array([[10.0, 0.1]], np.float32), 3)
    assert ids[0].tolist() == [0, 2, 1]
    assert sims[0, 0] == pytest.approx(np.cos(np.arctan(0.01)), abs=1e-5)


def test_leave_one_out_drops_each_row_itself() -> None:
    sims = np.array([[1.0, 0.5, 0.2], [0.9, 0.8, 0.1], [0.7, 0.6, 0.3]])
    ids = np.array([[0, 1, 2], [0, 1, 2], [0, 1, 2]])
    ids[2] = [0, 1, 3]  # row 2 is not among its own results (ties): its farthest neighbour goes instead
    s, i = _without_self(sims, ids, 2)
    assert i.tolist() == [[1, 2], [0, 2], [0, 1]] and s.tolist() == [[0.5, 0.2], [0.9, 0.1], [0.7, 0.6]]


def test_grid_view_sees_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer that is only a position: the mean view is at chance, the grid view picked by leave-one-out
    solves it; the chosen view is recorded and used again at re-evaluation."""
    data, cache = positional(tmp_path / "pos")
    monkeypatch.setattr("ava.cache.open_cache", lambda *a, **k: cache)
    config = dict(data=str(data), cache="unused", vfm="fake", progress=False)
    run = train(KNNConfig(out=str(tmp_path / "grid"), **config))
    mean_only = train(KNNConfig(out=str(tmp_path / "mean"), pools=["mean"], **config))
    result = json.loads((run / "results_test.json").read_text())["abilities"]["spatial"]
    meta = json.loads((run / META_FILE).read_text())["spatial"]
    assert result["extra"]["pool"] == meta["pool"] != "mean"
    assert set(meta["heldout_by_pool"]) == {"mean", "grid2", "grid4"}
    assert meta["selection"] == "loo" and meta["n_heldout"] == meta["n_train"] == 80
    mean_value = json.loads((mean_only / "results_test.json").read_text())["abilities"]["spatial"]["value"]
    assert result["value"] >= 0.9 and mean_value <= 0.5, (result["value"], mean_value)
    before = _predictions(run)
    evaluate(run, "test")
    assert _predictions(run) == before
    held = train(KNNConfig(out=str(tmp_path / "held"), selection="heldout", **config))
    assert json.loads((held / META_FILE).read_text())["spatial"]["n_heldout"] == 8
    for bad in (dict(selection="kfold"), dict(heldout_rows=0), dict(loo_max_rows=None)):
        name = next(iter(bad))
        with pytest.raises(AvaError, match=f"knn {name}: must be") as err:
            train(KNNConfig(out=str(tmp_path / "bad"), **bad, **config))
        assert "\n" not in str(err.value)
    assert not (tmp_path / "bad").exists()


def _scene_samples(sizes: dict[str, int], prefix: str = "s") -> list[Sample]:
    """Scene questions, ``sizes[answer]`` of each answer (the answer is the stratum, as the split has it)."""
    options = list(sizes)
    return [
        Sample(
            id=f"{prefix}{answer}-{i}",
            ava="scene",
            image=f"00/{answer}{i}.png",
            width=4,
            height=4,
            question="?",
            answer=answer,
            truth={"index": options.index(answer), "text": answer},
            options=options,
        )
        for answer, n in sizes.items()
        for i in range(n)
    ]


def test_the_subsample_is_stratified_and_deterministic() -> None:
    """Each answer class gives its share of the subsample (floored, the rows left to the largest remainders), the
    same rows whatever order the samples come in, other rows for another seed, every row when asked for as many."""
    from ava.heads.targets import stratified_rows

    sizes = {"beach": 500, "forest": 300, "city": 150, "desert": 49, "lake": 1}
    samples = _scene_samples(sizes)
    picked = stratified_rows(samples, 100, seed=0)
    assert len(picked) == len(set(picked.tolist())) == 100 and np.all(np.diff(picked) > 0)
    got = {a: sum(samples[i].truth["text"] == a for i in picked) for a in sizes}
    assert got == {"beach": 50, "forest": 30, "city": 15, "desert": 5, "lake": 0}, got  # 4.9 -> 5, 0.1 -> 0
    shuffled = [samples[i] for i in np.random.default_rng(3).permutation(len(samples))]
    ids = {samples[i].id for i in picked}
    assert {shuffled[i].id for i in stratified_rows(shuffled, 100, seed=0)} == ids
    assert np.array_equal(stratified_rows(samples, 100, seed=0), picked)
    other = {samples[i].id for i in stratified_rows(samples, 100, seed=1)}
    assert other != ids and len(other) == 100
    assert stratified_rows(samples, 1000).tolist() == list(range(1000))
    assert stratified_rows(samples, 5000).tolist() == list(range(1000))
    # uneven shares: every class within one row of its share, the total exact
    uneven = _scene_samples({"beach": 7, "forest": 5, "city": 3, "desert": 2}, prefix="u")
    for n in range(1, len(uneven)):
        rows = stratified_rows(uneven, n, seed=0)
        assert len(rows) == n
        for answer, size in {"beach": 7, "forest": 5, "city": 3, "desert": 2}.items():
            share = n * size / len(uneven)
            assert np.floor(share) <= sum(uneven[i].truth["text"] == answer for i in rows) <= np.ceil(share)


def test_each_subsample_row_gets_its_leave_one_out_neighbours() -> None:
    """A subsample row is answered by all the other train rows: its 1-NN vote is the one leave-one-out gives it,
    so the subsample's score is the mean of leave-one-out's outcomes over those rows (checked against a brute-force
    cosine 1-NN over the rows)."""
    from ava.heads.knn.model import normalized
    from ava.heads.knn.train import select_k

    samples = _scene_samples({"beach": 40, "forest": 40, "city": 40})
    rng = np.random.default_rng(0)
    labels = np.array([["beach", "forest", "city"].index(s.truth["text"]) for s in samples])
    x = normalized((rng.normal(0, 1.0, (120, 6)) + 0.8 * np.eye(6)[labels]).astype(np.float32))
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    right = labels[sims.argmax(1)] == labels  # leave-one-out's 1-NN outcome of every row
    ability = get_ability("scene")
    _, loo = select_k(ability, samples, None, x, None, [1], "cpu")
    assert loo[1] == pytest.approx(right.mean())
    rows = np.array([0, 5, 41, 42, 90, 119])
    _, sub = select_k(ability, samples, None, x, None, [1], "cpu", queries=rows)
    assert sub[1] == pytest.approx(right[rows].mean()) and 0 < sub[1] < 1


def test_below_the_threshold_the_pick_is_leave_one_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` is leave-one-out up to loo_max_rows train rows (the same view, k and scores as ``loo``, the
    subsample never drawn), and the subsample of heldout_rows above it; knn.json records which and by what rule."""
    from ava.heads import targets

    data, cache = positional(tmp_path / "pos")  # 80 train rows
    monkeypatch.setattr("ava.cache.open_cache", lambda *a, **k: cache)
    config = dict(data=str(data), cache="unused", vfm="fake", progress=False, heldout_rows=20)
    loo = json.loads((train(KNNConfig(out=str(tmp_path / "loo"), selection="loo", **config)) / META_FILE).read_text())
    draws: list[int] = []
    stratified_rows = targets.stratified_rows
    monkeypatch.setattr(
        "ava.heads.knn.train.stratified_rows", lambda s, n, seed: draws.append(n) or stratified_rows(s, n, seed)
    )
    at = train(KNNConfig(out=str(tmp_path / "at"), loo_max_rows=80, **config))
    meta = json.loads((at / META_FILE).read_text())["spatial"]
    assert not draws and meta["selection"] == "loo" and meta["n_heldout"] == meta["n_fit"] == 80
    for key in ("pool", "k", "heldout", "heldout_by_pool"):
        assert meta[key] == loo["spatial"][key], key
    rule = meta["selection_rule"]
    assert rule["asked"] == "auto" and rule["method"] == "loo" and rule["loo_max_rows"] == 80

    above = train(KNNConfig(out=str(tmp_path / "above"), loo_max_rows=79, **config))
    meta = json.loads((above / META_FILE).read_text())["spatial"]
    assert draws == [20] and meta["selection"] == "subsample"
    assert meta["n_heldout"] == 20 and meta["n_fit"] == meta["n_train"] == 80
    rule = meta["selection_rule"]
    assert {k: rule[k] for k in ("asked", "method", "loo_max_rows", "heldout_rows", "seed")} == {
        "asked": "auto",
        "method": "subsample",
        "loo_max_rows": 79,
        "heldout_rows": 20,
        "seed": 0,
    }
    assert "stratified" in rule["rule"] and "all the other train rows" in rule["rule"]
    assert set(meta["heldout_by_pool"]) == {"mean", "grid2", "grid4"}
    assert all(set(v) == {"1", "5", "20"} for v in meta["heldout_by_pool"].values())
    assert meta["heldout"] == meta["heldout_by_pool"][meta["pool"]] and meta["pool"] != "mean"
    assert meta["heldout_by_pool"] != loo["spatial"]["heldout_by_pool"]  # 20 rows scored, not 80
    result = json.loads((above / "results_test.json").read_text())["abilities"]["spatial"]
    assert result["value"] >= 0.9 and result["extra"]["pool"] == meta["pool"]
    before = _predictions(above)
    evaluate(above, "test")
    assert _predictions(above) == before
    again = train(KNNConfig(out=str(tmp_path / "again"), selection="subsample", **config))
    meta_again = json.loads((again / META_FILE).read_text())["spatial"]
    assert meta_again["selection"] == "subsample" and meta_again["selection_rule"]["asked"] == "subsample"
    for key in ("pool", "k", "heldout_by_pool", "n_heldout"):
        assert meta_again[key] == meta[key], key


@pytest.mark.slow
def test_every_kind_run_dir_reevaluation_and_determinism(
    monkeypatch: pytest.MonkeyPatch, handmade_data: tuple[Path, FakeCache], tmp_path: Path
) -> None:
    data, cache = handmade_data
    monkeypatch.setattr("ava.cache.open_cache", lambda *a, **k: cache)
    config = dict(data=str(data), cache="unused", vfm="fake", progress=False)
    run = train(KNNConfig(out=str(tmp_path / "run"), **config))
    names = {p.name for p in run.iterdir()}
    assert {"config.json", "run.json", "results_test.json", "predictions_test.jsonl", META_FILE, INDEX_DIR} <= names
    assert sorted(p.name for p in (run / INDEX_DIR).iterdir()) == sorted(f"{a}.faiss" for a in ONE_PER_ANSWER_KIND)
    results = json.loads((run / "results_test.json").read_text())
    assert results["run"]["head"] == "knn" and results["run"]["cache_key"] == "fake0001"
    for ava, r in results["abilities"].items():
        extra = r["extra"]
        assert extra["k"] in (1, 5, 20) and set(extra["heldout"]) == set(extra["test_by_k"]) == {"1", "5", "20"}
        assert extra["test_by_k"][str(extra["k"])] == pytest.approx(r["value"]), ava
    values = {k: v["value"] for k, v in results["abilities"].items()}
    assert values["spatial"] >= 0.9 and values["scene"] >= 0.8
    for ava in ("counting", "abs_depth", "color"):
        assert values[ava] < 0.7 * majority_baseline(data, ava), (ava, values[ava])
    before = _predictions(run)
    evaluate(run, "test")
    assert _predictions(run) == before
    again = train(KNNConfig(out=str(tmp_path / "again"), **config))
    assert _predictions(again) == before
    single = train(KNNConfig(out=str(tmp_path / "k1"), k=1, ava=["ocr", "spatial"], **config))
    meta = json.loads((single / META_FILE).read_text())
    assert meta["ocr"]["k"] == 1 and meta["spatial"]["ks"] == [1]


@pytest.mark.slow
def test_pixels_beat_majority(tmp_path_factory: pytest.TempPathFactory, pixel_suite: tuple[Path, Path]) -> None:
    """Raw pixels through the real cache. The mean keeps the overall colour, which separates synthetic scene and
    depth classes; counts need where things are, which the grid-cell views keep (the mean alone barely beats
    the median count). The colour inside a box is beyond a nearest-neighbour vote on pooled pixels (see
    test_probe's attentive probe), and spatial relations only marginally within its reach."""
    data, cache = pixel_suite
    out = tmp_path_factory.mktemp("knn_pixels")
    run = train(
        KNNConfig(
            data=str(data),
            cache=str(cache),
            vfm="pixels",
            out=str(out),
            progress=False,
            ava=["scene", "abs_depth", "counting"],
        )
    )
    results = json.loads((run / "results_test.json").read_text())["abilities"]
    values = {k: v["value"] for k, v in results.items()}
    base = {ava: majority_baseline(data, ava) for ava in values}
    assert values["scene"] > base["scene"] + 0.5, (values, base)
    assert values["abs_depth"] < 0.75 * base["abs_depth"], (values, base)
    assert values["counting"] < 0.75 * base["counting"], (values, base)
    assert results["counting"]["extra"]["pool"].startswith("grid"), results["counting"]["extra"]


def test_cli_train_and_eval(
    monkeypatch: pytest.MonkeyPatch, handmade_data: tuple[Path, FakeCache], tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from ava.cli.main import app

    data, cache = handmade_data
    monkeypatch.setattr("ava.cache.open_cache", lambda *a, **k: cache)
    out = tmp_path / "cli"
    args = ["head", "train", "--head", "knn", "--data", str(data), "--cache", "x", "--vfm", "fake", "--out", str(out)]
    options = ["--ava", "spatial", "--ava", "color", "--k", "1", "--k", "5", "--max-train", "10"]
    result = CliRunner().invoke(app, [*args, *options])
    assert result.exit_code == 0, result.output
    meta = json.loads((out / META_FILE).read_text())
    assert list(meta) == ["spatial", "color"] and meta["color"]["ks"] == [1, 5] and meta["color"]["n_train"] == 10
    result = CliRunner().invoke(app, ["head", "eval", "--run", str(out), "--split", "train"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "results_train.json").read_text())["split"]["name"] == "train"
    sub = tmp_path / "sub"
    picked = ["--ava", "spatial", "--selection", "subsample", "--heldout-rows", "7", "--loo-max-rows", "9"]
    result = CliRunner().invoke(app, [*args[:-1], str(sub), *picked])
    assert result.exit_code == 0, result.output
    meta = json.loads((sub / META_FILE).read_text())["spatial"]
    assert meta["selection"] == "subsample" and meta["n_heldout"] == 7 and meta["selection_rule"]["loo_max_rows"] == 9


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--selection", "kfold"], "--selection"),
        (["--heldout-rows", "0"], "--heldout-rows"),
        (["--loo-max-rows", "-5"], "--loo-max-rows"),
        (["--heldout-rows", "2.5"], "--heldout-rows"),
    ],
)
def test_cli_refuses_a_bad_selection_option(tmp_path: Path, cli: Cli, option: list[str], said: str) -> None:
    out = tmp_path / "run"
    args = ["head", "train", "--head", "knn", "--data", str(tmp_path), "--cache", "x", "--vfm", "pixels"]
    code, text = cli([*args, "--out", str(out), *option], one_line=True)
    assert code == 2 and said in text, text
    assert not out.exists()


def test_config_file_and_other_heads_refuse_a_bad_selection(tmp_path: Path) -> None:
    from ava.api import head_config

    toml = tmp_path / "knn.toml"
    toml.write_text('selection = "kfold"\n')
    with pytest.raises(AvaError, match=f"config file {toml}: selection: must be one of auto, loo, subsample"):
        head_config("knn", toml)
    toml.write_text("heldout_rows = 0\n")
    with pytest.raises(AvaError, match="heldout_rows: must be an integer >= 1"):
        head_config("knn", toml)
    assert head_config("knn", None, selection="loo", loo_max_rows=10)[1].loo_max_rows == 10
    with pytest.raises(AvaError, match="has no option --selection"):
        head_config("probe-linear", None, selection="loo")


def test_torch_index_matches_faiss() -> None:
    """The exact matmul + top-k index (CUDA without faiss-gpu) returns faiss's neighbours, padding included."""
    from ava.heads.knn.model import TorchFlatIP

    x = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    index = build_index(x)
    queries = x[:7] + 0.1
    ours = search(TorchFlatIP(index.reconstruct_n(0, index.ntotal), "cpu"), queries, 60)
    ref = search(index, queries, 60)
    np.testing.assert_array_equal(ours[1], ref[1])
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5, atol=1e-6)


def test_mean_score_with_a_shared_memo_scores_each_pair_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A selection's candidates share one memo: the same (sample, reply) is parsed and scored once, and the means
    equal those computed without a memo."""
    from ava.heads import targets
    from ava.metrics import scoring

    scene = get_ability("scene")
    samples = [
        Sample(
            id=str(i),
            ava="scene",
            image=f"00/{i:02d}.png",
            width=10,
            height=10,
            question="?",
            answer="beach",
            truth={"index": i % 3, "text": ["beach", "forest", "city"][i % 3]},
            options=["beach", "forest", "city"],
        )
        for i in range(12)
    ]
    runs = [["beach"] * 12, ["forest" if i % 2 else "beach" for i in range(12)], ["city"] * 6 + ["beach"] * 6]
    scored: list[int] = []
    score_samples = scoring.score_samples
    monkeypatch.setattr(scoring, "score_samples", lambda a, s, r, **kw: scored.append(len(s)) or score_samples(a, s, r))
    memo: dict = {}
    with_memo = [targets.mean_score(scene, samples, replies, memo) for replies in runs]
    pairs = {(s.key, r) for replies in runs for s, r in zip(samples, replies, strict=True)}
    assert sum(scored) == len(pairs) == len(memo)
    assert with_memo == [targets.mean_score(scene, samples, replies) for replies in runs]
    assert with_memo[0] == pytest.approx(4 / 12)


def test_own_rows_and_normalized_rows_search_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows normalized once (by blocks: each row's norm is its own, so the values are those of the whole array at
    once) give the same index and search as raw rows; a torch index searched with its own rows uses the copy it holds
    and returns what the same rows given as queries return."""
    from ava.heads.knn import model
    from ava.heads.knn.model import TorchFlatIP, make_index, normalized

    rng = np.random.default_rng(1)
    x = rng.standard_normal((70, 24)).astype(np.float32)
    x[3] = 0.0
    monkeypatch.setattr(model, "NORM_BLOCK", 24 * 4 * 8)  # 8 rows a block: 9 blocks, the last one short
    unit = normalized(x)
    whole = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    assert unit.dtype == np.float32 and unit.flags.c_contiguous and np.array_equal(unit, whole)
    for threads in (1, 2, 4, 64):  # the blocks shared among threads (more threads than blocks too): the same bits
        assert np.array_equal(normalized(x, threads=threads), whole), threads
    assert normalized(x[:0], threads=4).shape == (0, 24)
    ref = search(build_index(x), x, 9)
    for got in (
        search(build_index(unit, unit=True), unit, 9, unit=True),
        search(make_index(unit, "cpu"), unit, 9, unit=True),
    ):
        np.testing.assert_array_equal(got[1], ref[1])
        np.testing.assert_array_equal(got[0], ref[0])
    own = TorchFlatIP(unit, "cpu", own=True)
    calls: list[str] = []
    monkeypatch.setattr(own, "search", lambda q, k: calls.append("copied") or TorchFlatIP.search(own, q, k))
    mine = search(own, unit, 9, batch_size=32, unit=True)
    assert not calls  # every batch from the rows it holds
    other = search(own, unit.copy(), 9, batch_size=32, unit=True)
    assert calls == ["copied"] * 3
    np.testing.assert_array_equal(mine[1], other[1])
    np.testing.assert_array_equal(mine[0], other[0])


def _test_scores(run: Path) -> dict[str, dict[str, float]]:
    by: dict[str, dict[str, float]] = {}
    for p in _predictions(run):
        by.setdefault(p["ava"], {})[p["id"]] = p["score"]
    return by


@pytest.mark.slow
def test_the_subsample_picks_as_leave_one_out_on_the_suite(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The 14 synthetic abilities x 1500 samples (1200 train rows each) through the `pixels` extractor: the subsample
    (forced by a threshold below every ability's train rows; 400 rows answered) picks leave-one-out's (view, k) on
    most abilities, and where it does not, the two picks are a tie on test: the subsample's test score inside the 95%
    bootstrap interval of leave-one-out's, or the paired 95% interval of their difference holding 0, or the
    subsample's score the better one. (The abilities it differs on are near-ties on train too: a pick among 9
    candidates a sample or two apart, which any subset of train can turn.)"""
    from ava.abilities import ABILITY_KEYS
    from ava.cache import ExtractConfig, extract
    from ava.report import bootstrap as bs
    from ava.synth import SynthConfig, generate

    base = tmp_path_factory.mktemp("knn_suite")
    data, cache, vfm = base / "data", base / "cache", "pixels#size=64"
    generate(SynthConfig(out=str(data), per_ava=1500, size=64, seed=0), progress=False)
    extract(ExtractConfig(vfm=vfm, data=str(data), cache=str(cache), device="cpu", progress=False))
    config = dict(data=str(data), cache=str(cache), vfm=vfm, device="cpu", progress=False)
    loo = train(KNNConfig(out=str(base / "loo"), **config))  # auto: 1200 train rows, under the threshold
    sub = train(KNNConfig(out=str(base / "sub"), loo_max_rows=1000, heldout_rows=400, **config))
    meta_loo, meta_sub = (json.loads((r / META_FILE).read_text()) for r in (loo, sub))
    values = {r: json.loads((r / "results_test.json").read_text())["abilities"] for r in (loo, sub)}
    scores_loo, scores_sub = _test_scores(loo), _test_scores(sub)
    assert sorted(meta_sub) == sorted(ABILITY_KEYS)
    same, differ = [], []
    for ava in ABILITY_KEYS:
        a, b = meta_sub[ava], meta_loo[ava]
        assert b["selection"] == "loo" and b["n_heldout"] == b["n_train"] == 1200, ava
        assert a["selection"] == "subsample" and a["n_heldout"] == 400 and a["n_fit"] == 1200, ava
        if (a["pool"], a["k"]) == (b["pool"], b["k"]):
            same.append(ava)
            assert values[sub][ava]["value"] == values[loo][ava]["value"]
            continue
        ids = sorted(scores_loo[ava])
        paired = np.array([[scores_loo[ava][i] for i in ids], [scores_sub[ava][i] for i in ids]])
        reps = bs.replicate_means(paired, rng=bs.rng_for(ava))
        (lo, hi), (dlo, dhi) = bs.interval(reps[0]), bs.interval(reps[1] - reps[0])
        v_loo, v_sub = values[loo][ava]["value"], values[sub][ava]["value"]
        better = v_sub >= v_loo if get_ability(ava).higher_is_better else v_sub <= v_loo
        differ.append((ava, v_sub, v_loo, (lo, hi), (dlo, dhi)))
        assert lo <= v_sub <= hi or dlo <= 0 <= dhi or better, differ[-1]
    assert len(same) >= 10, differ
