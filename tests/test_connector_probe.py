"""``ava head probe-connector``: the same linear probe on a tiny LLM-head run's raw features and on its connector's
outputs (tiny RANDOM LLM_VFM and LLM); the raw side equals a fingerprint of the run's own cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import LLM, LLM_VFM, make_cache, make_rel_depth


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    import ava

    root = tmp_path_factory.mktemp("conn")
    data = make_rel_depth(root / "d", n=48)
    cache = make_cache(data, root / "c")
    run = ava.train_head(
        "llm",
        vfm=LLM_VFM,
        data=str(data),
        cache=str(cache),
        out=str(root / "llm"),
        llm=LLM,
        lora_r=4,
        epochs=1,
        batch_size=8,
        max_eval=4,
        progress=False,
    ).run_dir
    return run, data, cache


@pytest.mark.slow
def test_probe_on_raw_features_and_connector_outputs(llm_run, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    import ava
    from ava.report.connector import probe_connector

    run, data, cache = llm_run
    result = probe_connector(run, heads=("probe-linear", "knn"))
    assert set(result.scores) == {"raw", "connector"} and result.dims["raw"] == 64
    raw = result.scores["raw"]["probe-linear"]["rel_depth"]
    con = result.scores["connector"]["probe-linear"]["rel_depth"]
    assert 0.0 <= raw <= 1.0 and 0.0 <= con <= 1.0
    # the raw side is the fingerprint of the run's own cache (same probe code, same features)
    fp = ava.fingerprint(LLM_VFM, data, cache, tmp_path / "fp", heads=["probe-linear", "knn"], ava="rel_depth")
    assert raw == pytest.approx(fp.scores["probe-linear"]["rel_depth"], abs=1e-6)
    assert result.scores["raw"]["knn"]["rel_depth"] == pytest.approx(fp.scores["knn"]["rel_depth"], abs=1e-6)
    # a connector that maps every token to zero leaves the probe nothing: the connector side drops to chance
    state = load_file(str(run / "connector.safetensors"))
    zeroed = {k: torch.zeros_like(v) for k, v in state.items()}
    save_file(zeroed, str(run / "connector.safetensors"))
    try:
        dead = probe_connector(run, heads=("knn",))
    finally:
        save_file(state, str(run / "connector.safetensors"))
    assert dead.scores["connector"]["knn"]["rel_depth"] <= 0.5 + 1e-9


def test_cli_probe_connector_and_a_run_without_connector(llm_run, tmp_path: Path, capsys) -> None:
    from ava.cli.main import main

    run, _, _ = llm_run
    with pytest.raises(SystemExit) as exc:
        main(["head", "probe-connector", "--run", str(run), "--head", "knn"])
    assert not exc.value.code
    out = capsys.readouterr().out
    assert "connector probe" in out and "rel_depth" in out and "knn" in out
    (tmp_path / "x").mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["head", "probe-connector", "--run", str(tmp_path / "x")])
    assert exc.value.code == 2 and "run.json is missing" in " ".join(capsys.readouterr().err.split())
