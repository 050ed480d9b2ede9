"""``ava vlm answer``: tiny RANDOM LLaVA and Qwen2-VL checkpoints saved with ``save_pretrained`` answer a split
(greedy, batched), the run resumes per sample, is scored like ``ava score`` and shown by ``ava report`` as head
``vlm:<model>``; a processor without images and replies scored against other data are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import Cli, make_choice_data, save_tiny_text_llm, save_tiny_vlm


@pytest.fixture(scope="module", params=["llava", "qwen2vl"])
def vlm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_vlm(tmp_path_factory.mktemp(request.param) / request.param, request.param)


def _replies(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "replies.jsonl").read_text().splitlines() if line.strip()]


def test_vlm_answers_resumes_and_is_reported_as_a_head(vlm: Path, choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    import ava

    run = tmp_path / "run"
    base = [
        "vlm",
        "answer",
        "--model",
        str(vlm),
        "--data",
        str(choice_data),
        "--out",
        str(run),
        "--random-weights",
        "--batch-size",
        "3",
        "--max-new-tokens",
        "4",
        "-q",
    ]
    code, text = cli([*base, "--max-samples", "2"], one_line=True)
    assert code == 0, text
    assert len(_replies(run)) == 4  # 2 per ability
    with (run / "replies.jsonl").open("a") as f:
        f.write('{"ava": "recognition", "id": "r7')  # a kill in the middle of a line
    code, text = cli(base, one_line=True)
    assert code == 0 and "12 answered, 4 already there" in text, text
    replies = _replies(run)
    assert len(replies) == 16 and len({(r["ava"], r["id"]) for r in replies}) == 16
    results = json.loads((run / "results_test.json").read_text())
    assert results["abilities"]["recognition"]["n"] == 8 and results["abilities"]["counting"]["n"] == 8
    # greedy decoding: the same model gives the same replies again
    again = ava.vlm_answer(vlm, choice_data, tmp_path / "again", max_new_tokens=4, batch_size=5)
    assert {(r["ava"], r["id"]): r["prediction"] for r in _replies(tmp_path / "again")} == {
        (r["ava"], r["id"]): r["prediction"] for r in replies
    }
    assert again.answered == 16
    # ava score of the replies gives the run's results; ava report shows the run as head vlm:<model>
    scored = ava.score(choice_data, run / "replies.jsonl", out=tmp_path / "scored")
    assert scored.scores == {a: r["value"] for a, r in results["abilities"].items()}
    report = ava.make_report([run], tmp_path / "report", n_boot=100).data
    head = next(iter(report["heads"].values()))
    assert head["id"] == f"vlm:{vlm.name}" and head["head_random_weights"] and "random weights" in head["head"]


def test_vlm_replies_for_other_data_are_refused(vlm: Path, choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    run = tmp_path / "run"
    assert (
        cli(
            [
                "vlm",
                "answer",
                "--model",
                str(vlm),
                "--data",
                str(choice_data),
                "--out",
                str(run),
                "--ava",
                "recognition",
                "--max-new-tokens",
                "2",
                "-q",
            ],
            one_line=True,
        )[0]
        == 0
    )
    other = make_choice_data(tmp_path / "other", seed=1)
    code, text = cli(
        ["vlm", "answer", "--model", str(vlm), "--data", str(other), "--out", str(run), "-q"], one_line=True
    )
    assert code == 2 and "holds replies for other data" in text, text
    code, text = cli(
        [
            "score",
            "--data",
            str(other),
            "--pred",
            str(run / "replies.jsonl"),
            "--ava",
            "recognition",
            "--out",
            str(tmp_path / "s"),
        ],
        one_line=True,
    )
    assert code == 2 and f"holds replies of VLM {vlm}" in text and "abilities recognition differ" in text, text
    assert not (tmp_path / "s").exists()


def test_a_checkpoint_whose_processor_takes_no_images_is_refused(choice_data: Path, tmp_path: Path, cli: Cli) -> None:
    llm = save_tiny_text_llm(tmp_path / "llm")
    code, text = cli(
        ["vlm", "answer", "--model", str(llm), "--data", str(choice_data), "--out", str(tmp_path / "run")],
        one_line=True,
    )
    assert code == 2 and "cannot take images and text" in text and "Traceback" not in text, text
    assert not (tmp_path / "run").exists()
