"""FOCI's heads on a GPU (CI has none: these run in ``gpu.sh``'s preflight): the zero-shot head and ``ava vlm
answer``, tiny RANDOM checkpoints saved with ``save_pretrained``, run as a user runs them with ``--device cuda``,
beside the same commands on the CPU. Until now both had run on CPUs only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import Cli, make_choice_data, save_tiny_image_text, save_tiny_vlm

NO_GPU = "FOCI's heads on a GPU"


def _predictions(path: Path) -> dict[tuple[str, str], str]:
    return {(r["ava"], r["id"]): r["prediction"] for r in map(json.loads, path.read_text().splitlines()) if r}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_zero_shot_on_a_gpu_answers_as_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    """The options ranked by the towers' cosine similarity on the GPU: every test sample answered and parsed, the
    same replies as the CPU's but where two options' similarities are within float32 rounding of each other (cuDNN's
    TF32 convolutions off: the patch embedding's would round further by design)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    from ava.data.format import Dataset
    from ava.vfm.image_text import load_image_text

    data = make_choice_data(tmp_path / "d")
    ckpt = save_tiny_image_text(tmp_path / "clip", "clip")
    runs = {}
    for device in ("cpu", "cuda"):
        runs[device] = tmp_path / device
        code, text = cli(
            [
                "head",
                "train",
                "--head",
                "zero-shot",
                "--vfm",
                f"tiny-clip@{ckpt}",
                "--data",
                str(data),
                "--out",
                str(runs[device]),
                "--device",
                device,
            ],
            one_line=True,
        )
        assert code == 0, text
    res = json.loads((runs["cuda"] / "results_test.json").read_text())["abilities"]["recognition"]
    assert res["n"] == 8 and res["n_unparsed"] == 0, res
    cpu, gpu = (_predictions(runs[d] / "predictions_test.jsonl") for d in ("cpu", "cuda"))
    assert cpu.keys() == gpu.keys() and len(gpu) == 8
    model, dataset = load_image_text(str(ckpt)), Dataset(data)
    for s in dataset.samples("recognition", split="test"):
        if cpu[("recognition", s.id)] != gpu[("recognition", s.id)]:  # only a near tie may differ
            img = model.images([dataset.load_image(s)])[0]
            sims = sorted(model.texts([f"a photo of a {o}." for o in s.options]) @ img)
            assert sims[-1] - sims[-2] < 1e-4, (s.id, sims[-2:])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
@pytest.mark.parametrize("kind", ["llava", "qwen2vl"])
def test_vlm_answer_on_a_gpu(kind: str, tmp_path: Path, cli: Cli) -> None:
    """Greedy, batched answers of a tiny random VLM on the GPU in fp32: every sample answered once and scored."""
    data = make_choice_data(tmp_path / "d")
    vlm = save_tiny_vlm(tmp_path / kind, kind)
    run = tmp_path / "run"
    code, text = cli(
        [
            "vlm",
            "answer",
            "--model",
            str(vlm),
            "--data",
            str(data),
            "--out",
            str(run),
            "--random-weights",
            "--batch-size",
            "3",
            "--max-new-tokens",
            "4",
            "--device",
            "cuda",
            "--dtype",
            "fp32",
            "-q",
        ],
        one_line=True,
    )
    assert code == 0, text
    replies = [json.loads(x) for x in (run / "replies.jsonl").read_text().splitlines() if x.strip()]
    assert len(replies) == 16 and len({(r["ava"], r["id"]) for r in replies}) == 16
    results = json.loads((run / "results_test.json").read_text())
    assert results["abilities"]["recognition"]["n"] == 8 and results["abilities"]["counting"]["n"] == 8


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_the_text_tower_miner_on_a_gpu_mines_the_cpus_options(tmp_path: Path, cli: Cli) -> None:
    """``ava data options --miner clip@DIR --device cuda``: the same hard negatives, in the same order, as on the CPU
    (the class names' text embeddings of a tiny random CLIP: no two within float32 rounding here)."""
    from ava.data.format import Dataset

    data = make_choice_data(tmp_path / "d")
    ckpt = save_tiny_image_text(tmp_path / "clip", "clip")
    mined = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / f"mined-{device}"
        code, text = cli(
            ["data", "options", "--data", str(data), "--miner", f"clip@{ckpt}", "--out", str(out), "--device", device],
            one_line=True,
        )
        assert code == 0, text
        mined[device] = {s.id: (s.options, s.answer) for s in Dataset(out).samples("recognition")}
    assert len(mined["cuda"]) == 40 and mined["cuda"] == mined["cpu"]
