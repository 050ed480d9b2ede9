"""Bootstrap intervals, paired "A beats B", tie groups, vectorized rank correlations, same-data checks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import kendalltau, spearmanr
from typer.testing import CliRunner

from ava.cli.main import app
from ava.report import bootstrap as bs
from ava.report import build_report
from ava.report.strict_json import dumps, loads_strict
from tests.helpers import RUN_VALUES, write_run


def test_constant_predictor_has_zero_width():
    reps = bs.replicate_means(np.full((1, 50), 0.7), 500, bs.rng_for("x"))
    lo, hi = bs.interval(reps)[0]
    assert lo == pytest.approx(0.7) and hi == pytest.approx(0.7)


def test_intervals_cover_the_known_mean_at_about_the_nominal_rate():
    # 400 independent test sets of 80 Bernoulli(0.6) samples; the 95% interval should hold 0.6 about 95% of the
    # time (the percentile bootstrap runs a little under nominal at this n, never far off)
    rng = np.random.default_rng(123)
    hits = 0
    trials = 400
    for t in range(trials):
        scores = (rng.random(80) < 0.6).astype(float)
        lo, hi = bs.interval(bs.replicate_means(scores[None], 1000, bs.rng_for(str(t))))[0]
        hits += lo <= 0.6 <= hi
    assert 0.89 <= hits / trials <= 0.99


def test_bootstrap_is_seeded_and_paired():
    a = np.r_[np.ones(30), np.zeros(10)]
    b = a.copy()
    b[:5] = 0  # b is a minus five right answers, on the same samples
    reps = bs.replicate_means(np.stack([a, b]), 800, bs.rng_for("t", 3))
    again = bs.replicate_means(np.stack([a, b]), 800, bs.rng_for("t", 3))
    assert np.array_equal(reps, again)
    assert not np.array_equal(reps, bs.replicate_means(np.stack([a, b]), 800, bs.rng_for("t", 4)))
    p = bs.beats(reps, higher_is_better=True)
    # paired: in every replicate a >= b, so a beats b almost surely (ties, when no changed sample is drawn, count half)
    assert p[0, 1] > 0.99 and p[1, 0] < 0.01 and p[0, 1] + p[1, 0] == pytest.approx(1.0)
    assert bs.beats(reps, higher_is_better=False)[0, 1] < 0.01


def test_tie_groups():
    p = np.array([[0.5, 0.6, 0.99], [0.4, 0.5, 0.97], [0.01, 0.03, 0.5]])
    assert bs.tie_groups([0, 1, 2], p) == [[0, 1], [2]]


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
def test_rank_correlation_rows_match_scipy():
    rng = np.random.default_rng(0)
    x = rng.integers(1, 4, (50, 5)).astype(float)  # ties on purpose
    y = rng.integers(1, 5, (50, 5)).astype(float)
    tau, rho = bs.kendall_tau_b_rows(x, y), bs.spearman_rows(x, y)
    for i in range(50):
        want_tau, want_rho = kendalltau(x[i], y[i]).statistic, spearmanr(x[i], y[i]).statistic
        assert np.isnan(tau[i]) if np.isnan(want_tau) else tau[i] == pytest.approx(want_tau)
        assert np.isnan(rho[i]) if np.isnan(want_rho) else rho[i] == pytest.approx(want_rho)


def test_same_data_refused_unless_allow_mixed(tmp_path):
    full = [write_run(tmp_path / "a", "knn", v, RUN_VALUES["knn"][v]) for v in ("big", "small")]
    small = write_run(tmp_path / "b", "knn", "random", RUN_VALUES["knn"]["random"], n=6)
    rep = build_report([*full, small], n_boot=200)
    t = rep["heads"]["knn"]
    assert t["refused"] and "not scored on the same samples" in t["refused"] and "--allow-mixed" in t["refused"]
    assert "random n=6" in t["refused"] and "big n=40" in t["refused"]
    assert rep["refused"] == {"knn": t["refused"]}
    out = tmp_path / "rep"
    result = CliRunner().invoke(app, ["report", *map(str, [*full, small]), "--out", str(out), "--n-boot", "200"])
    assert result.exit_code == 1 and "refused" in result.output
    assert "**Refused:**" in (out / "report.md").read_text()
    result = CliRunner().invoke(
        app, ["report", *map(str, [*full, small]), "--out", str(out), "--n-boot", "200", "--allow-mixed"]
    )
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    assert "--allow-mixed: runs of this table were NOT all scored on the same samples" in md
    t = loads_strict((out / "report.json").read_text())["heads"]["knn"]
    assert t["refused"] is None and t["same_data"]["status"] == "mixed" and t["uncertainty"]["paired"] is False
    assert t["n"]["counting"] == {"big": 40, "small": 40, "random": 6}


def test_same_n_but_other_samples_is_mixed(tmp_path):
    a = write_run(tmp_path / "a", "knn", "big", RUN_VALUES["knn"]["big"])
    b = write_run(tmp_path / "b", "knn", "small", RUN_VALUES["knn"]["small"], id_prefix="other-")
    rep = build_report([a, b], n_boot=200)
    assert rep["heads"]["knn"]["same_data"]["status"] == "mixed" and rep["heads"]["knn"]["refused"]


def test_old_results_fingerprinted_from_predictions_or_unverified(tmp_path):
    # no sample_set in the results file: recomputed from predictions_test.jsonl
    old = [write_run(tmp_path / "a", "knn", v, RUN_VALUES["knn"][v], fingerprint=False) for v in ("big", "small")]
    rep = build_report(old, n_boot=200)
    assert rep["heads"]["knn"]["refused"] is None
    assert {r["sample_set_source"] for r in rep["runs"]} == {"predictions"}
    # neither fingerprint nor per-sample records: cannot be checked, so refused unless --allow-mixed
    bare = [
        write_run(tmp_path / "b", "knn", v, RUN_VALUES["knn"][v], fingerprint=False, records=False)
        for v in ("big", "small")
    ]
    rep = build_report(bare, n_boot=200)
    assert "cannot be checked" in rep["heads"]["knn"]["refused"]
    rep = build_report(bare, n_boot=200, allow_mixed=True)
    t = rep["heads"]["knn"]
    assert t["same_data"]["status"] == "unverified"
    assert "no per-sample scores" in t["uncertainty"]["missing"]["counting"]
    assert t["intervals"]["counting"] == {"big": None, "small": None}


def test_strict_json_helpers():
    assert (
        dumps({"x": float("nan"), "y": [np.float32(1.5), float("inf")]})
        == json.dumps({"x": None, "y": [1.5, None]}, indent=2) + "\n"
    )
    with pytest.raises(ValueError, match="NaN"):
        loads_strict('{"a": NaN}')


def test_agreement_needs_three_vfms(tmp_path):
    runs = [write_run(tmp_path, h, v, RUN_VALUES[h][v]) for h in RUN_VALUES for v in ("big", "small")]
    (agr,) = build_report(runs, n_boot=100)["agreement"]
    for a in (agr["average_rank"], *agr["abilities"].values()):
        assert a["kendall_tau"] is None and a["spearman_rho"] is None and a["kendall_p"] is None
        assert a["reason"] == "n/a: needs >= 3 VFMs in common (has 2)"
        assert "kendall_tau_ci" not in a


def test_decodes_of_one_head_are_two_heads(tmp_path):
    runs = [
        write_run(tmp_path / d, "llm", "big", RUN_VALUES["knn"]["big"], extra={"llm": "tiny", "decode": d})
        for d in ("generate", "score")
    ]
    rep = build_report(runs, n_boot=100)
    assert list(rep["heads"]) == ["llm:tiny:generate", "llm:tiny:score"]
    assert rep["heads"]["llm:tiny:score"]["head"] == "llm (tiny, score)"


def test_fingerprint_merges_per_ability_results():
    from ava.metrics.sample_set import merge, sample_set_block

    a = [{"ava": "color", "id": "1", "truth": [1, 2, 3]}, {"ava": "color", "id": "2", "truth": [9, 9, 9]}]
    b = [{"ava": "spatial", "id": "1", "truth": 2}]
    whole = sample_set_block(a + b)
    merged = merge([{**sample_set_block(a), "dataset": "/d"}, sample_set_block(b)])
    assert merged["value"] == whole["value"] and merged["per_ability"] == whole["per_ability"]
    assert merged["dataset"] == "/d" and merge([None, sample_set_block(b)]) is None
    # order of samples does not matter; a changed truth does
    assert sample_set_block(a[::-1])["value"] == sample_set_block(a)["value"]
    assert sample_set_block([{**a[0], "truth": [1, 2, 4]}, a[1]])["value"] != sample_set_block(a)["value"]
