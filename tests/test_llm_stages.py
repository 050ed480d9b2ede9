"""The paper's whole protocol from one cache, on CPU with tiny random models: stage 1 (connector alignment on
captions) -> stage 2 (full tuning on multi-turn conversations, some without an image) -> stage 3 (the LLM head,
``--init`` from stage 2). The loss falls at each stage, and stage 3 starts from exactly the stage-2 weights."""

from __future__ import annotations

import json
import os

import pytest
import torch
from PIL import Image

from ava.errors import AvaError
from ava.heads.llm import train as train_head  # (bound before the ava.heads.llm.train submodule shadows the name)
from tests.helpers import LLM, LLM_VFM, make_rel_depth


def _losses(run_dir) -> list[float]:
    return [json.loads(x)["loss"] for x in (run_dir / "train_log.jsonl").read_text().splitlines() if x.strip()]


def _falls(losses: list[float]) -> bool:
    k = max(1, len(losses) // 4)
    return sum(losses[-k:]) / k < sum(losses[:k]) / k


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    from ava.cache import ExtractConfig, extract
    from ava.heads.llm.align import import_captions
    from ava.heads.llm.stage2 import import_instructions

    root = tmp_path_factory.mktemp("stages")
    os.environ["AVA_HOME"] = str(tmp_path_factory.getbasetemp() / "ava_home")
    torch.set_num_threads(1)
    (root / "img").mkdir()
    caps, convs = [], []
    for i in range(8):
        colour = ("red", "green", "blue", "white")[i % 4]
        rgb = {"red": (220, 20, 20), "green": (20, 200, 20), "blue": (20, 20, 220), "white": (240, 240, 240)}[colour]
        Image.new("RGB", (32 + i, 32), rgb).save(root / "img" / f"{i}.png")
        caps.append(
            {
                "id": f"c{i}",
                "image": f"{i}.png",
                "conversations": [
                    {"from": "human", "value": "<image>\nGive a brief description of the image."},
                    {"from": "gpt", "value": f"a {colour} square"},
                ],
            }
        )
        convs.append(
            {
                "id": f"v{i}",
                "image": f"{i}.png",
                "conversations": [
                    {"from": "human", "value": "What colour is it?\n<image>"},
                    {"from": "gpt", "value": colour},
                    {"from": "human", "value": "Is it a square?"},
                    {"from": "gpt", "value": "yes"},
                ],
            }
        )
    for i in range(4):  # conversations without an image (LLaVA-665K has ~40K)
        convs.append(
            {
                "id": f"t{i}",
                "conversations": [{"from": "human", "value": f"Say {i}."}, {"from": "gpt", "value": f"{i}"}],
            }
        )
    (root / "caps.json").write_text(json.dumps(caps))
    (root / "convs.json").write_text(json.dumps(convs))
    import_captions(root / "caps.json", root / "img", root / "capdata")
    assert import_instructions(root / "convs.json", root / "img", root / "insdata") == (8, 4)
    data = make_rel_depth(root / "data", n=16)
    cache = root / "cache"  # one cache for the three stages
    for d, ava in ((root / "capdata", ["captions"]), (root / "insdata", ["instructions"]), (data, None)):
        extract(ExtractConfig(vfm=LLM_VFM, data=str(d), cache=str(cache), ava=ava, device="cpu", progress=False))
    return root, data, cache


@pytest.mark.slow
def test_stage_1_2_3_from_one_cache(chain):
    from safetensors.torch import load_file

    from ava.heads.llm import AlignConfig, InstructConfig, LLMHeadConfig
    from ava.heads.llm.align import align
    from ava.heads.llm.runtime import prepare_training
    from ava.heads.llm.stage2 import instruct

    root, data, cache = chain
    s1 = align(
        AlignConfig(
            vfm=LLM_VFM,
            data=str(root / "capdata"),
            cache=str(cache),
            out=str(root / "s1"),
            llm=LLM,
            batch_size=4,
            epochs=6,
            lr=1e-2,
            progress=False,
        )
    )
    assert _falls(_losses(s1))
    s2 = instruct(
        InstructConfig(
            vfm=LLM_VFM,
            data=str(root / "insdata"),
            cache=str(cache),
            out=str(root / "s2"),
            init=str(s1),
            llm=LLM,
            batch_size=4,
            epochs=6,
            lr=1e-3,
            progress=False,
        )
    )
    meta = json.loads((s2 / "training" / "run.json").read_text())
    assert meta["n_conversations"] == 8 and meta["n_text_only"] == 4 and meta["training"]["done"]
    assert _falls(_losses(s2 / "training"))
    s3cfg = LLMHeadConfig(
        ava=["rel_depth"],
        vfm=LLM_VFM,
        data=str(data),
        cache=str(cache),
        out=str(root / "s3"),
        llm=LLM,
        init=str(s2),
        epochs=4,
        lr=3e-3,
        batch_size=4,
        lora_r=4,
        progress=False,
        max_eval=2,
    )
    prep = prepare_training(s3cfg, device=torch.device("cpu"), dtype=torch.float32)
    want_conn = load_file(s2 / "connector.safetensors")
    assert all(torch.equal(prep.head.connector.state_dict()[k], want_conn[k]) for k in want_conn)
    want_llm = load_file(s2 / "model.safetensors")
    got = prep.head.base.state_dict()
    for key, value in want_llm.items():
        name = key if key in got else key.replace(".weight", ".base_layer.weight").replace(".bias", ".base_layer.bias")
        assert torch.equal(got[name], value), key
    base = load_file(_random_llm_file())
    assert any(not torch.equal(base[k], want_llm[k]) for k in want_llm if k in base)  # stage 2 moved the LLM
    assert prep.run["prompt_template"] == "qwen2_base" and prep.run["llm_source"] == str(s2.resolve())
    s3 = train_head(s3cfg)
    assert _falls(_losses(s3))
    assert json.loads((s3 / "results_test.json").read_text())["abilities"]["rel_depth"]["n"] == 2


def _random_llm_file():
    from ava.heads.llm.llms import LLMS, build_random_llm

    return build_random_llm(LLMS.get(LLM)) / "model.safetensors"


def test_bad_conversations_are_named(chain, tmp_path):
    from ava.heads.llm.stage2 import import_instructions

    root, _, _ = chain
    bad = [{"id": "x1", "conversations": [{"from": "gpt", "value": "hi"}, {"from": "human", "value": "?"}]}]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(AvaError, match=r"bad\.json.*'x1'.*alternate"):
        import_instructions(tmp_path / "bad.json", root / "img", tmp_path / "out")
    odd = [
        {
            "id": "x2",
            "conversations": [
                {"from": "human", "value": "a"},
                {"from": "gpt", "value": "b"},
                {"from": "human", "value": "c"},
            ],
        }
    ]
    (tmp_path / "odd.json").write_text(json.dumps(odd))
    with pytest.raises(AvaError, match="'x2'.*no gpt reply"):
        import_instructions(tmp_path / "odd.json", root / "img", tmp_path / "out2")
    (tmp_path / "nolist.json").write_text("{}")
    with pytest.raises(AvaError, match="nolist.json: expected a JSON list"):
        import_instructions(tmp_path / "nolist.json", root / "img", tmp_path / "out3")


def test_multi_turn_labels_cover_every_reply():
    from ava.heads.llm.llms import load_llm
    from ava.heads.llm.prompt import IGNORE, PromptEncoder, build_batch

    _, tok, _ = load_llm(LLM)
    enc = PromptEncoder(tok)
    e = enc.encode_turns([("What colour?", "red"), ("Square?", "yes")])
    t = enc.encode_turns([("Say 1.", "1")], image=False)
    batch = build_batch([e, t], 3, tok.pad_token_id)
    labels = batch["labels"][0]
    supervised = labels[labels != IGNORE].tolist()
    assert supervised == enc.answer_ids("red") + enc.answer_ids("yes")
    assert int(batch["image_mask"][0].sum()) == 3 and int(batch["image_mask"][1].sum()) == 0
    assert batch["labels"][1][batch["labels"][1] != IGNORE].tolist() == enc.answer_ids("1")


def test_instruct_owns_its_out(chain, tmp_path):
    """Stage 2 claims its --out like the other heads: a foreign directory, another config or a second job is
    refused before anything is written."""
    import dataclasses

    from ava.config import save_config
    from ava.heads.llm import InstructConfig
    from ava.heads.llm.stage2 import instruct
    from ava.heads.rundir import RunDirError
    from ava.locking import JobLock, LockBusyError

    root, _, cache = chain
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    cfg = InstructConfig(
        vfm=LLM_VFM,
        data=str(root / "insdata"),
        cache=str(cache),
        out=str(foreign),
        llm=LLM,
        batch_size=4,
        epochs=1,
        progress=False,
    )
    with pytest.raises(RunDirError, match="no stage-2 run"):
        instruct(cfg)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    s2 = tmp_path / "s2"
    (s2 / "training").mkdir(parents=True)
    save_config(dataclasses.replace(cfg, out=str(s2), lr=0.5), s2 / "training" / "config.json")
    with pytest.raises(RunDirError, match="lr") as refused:
        instruct(dataclasses.replace(cfg, out=str(s2)))
    assert "--force" not in str(refused.value).replace("has no --force", "")  # no option stage 2 lacks
    busy = JobLock(s2 / "training" / ".lock", "held by the test")
    try:
        with pytest.raises(LockBusyError, match="another training"):
            instruct(dataclasses.replace(cfg, out=str(s2), lr=0.5))
    finally:
        busy.close()
    assert sorted(p.name for p in (s2 / "training").iterdir()) == [".lock", "config.json"]
