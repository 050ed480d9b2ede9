"""LLM head: prompt and label mask, connector/LoRA model, supervised-only logits, registry, batching."""

from __future__ import annotations

import pytest
import torch

from ava.abilities import ABILITY_KEYS
from ava.errors import AvaError
from ava.heads.llm.data import length_grouped_batches
from ava.heads.llm.llms import LLMS, load_llm, resolve_llm
from ava.heads.llm.model import LORA_TARGETS, build_head
from ava.heads.llm.prompt import IGNORE, PromptEncoder, build_batch, prompt_text
from tests.helpers import example

T = 9  # image tokens in these tests


@pytest.fixture(autouse=True)
def _env(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("AVA_HOME", str(tmp_path_factory.getbasetemp() / "ava_home"))
    torch.set_num_threads(1)


@pytest.fixture(scope="module", params=["tiny-random-qwen2", "tiny-random-llama"])
def llm(request, tmp_path_factory):
    import os

    os.environ["AVA_HOME"] = str(tmp_path_factory.getbasetemp() / "ava_home")
    return (request.param, *load_llm(request.param)[1:])


def _fresh(llm):
    """A new copy of the fixture's model (LoRA wraps a model in place, so each test builds its own)."""
    return load_llm(llm[0])[0]


@pytest.mark.parametrize("ability", ABILITY_KEYS)
def test_label_mask_only_answer_and_eos(ability, llm):
    _, tok, _ = llm
    enc = PromptEncoder(tok)
    question, answer = example(ability)
    batch = build_batch([enc.encode(question, answer), enc.encode("short?", "x")], T, tok.pad_token_id)
    row_ids, row_labels, row_img = batch["input_ids"][0], batch["labels"][0], batch["image_mask"][0]
    supervised = row_labels != IGNORE
    expected = tok(f" {answer}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert row_labels[supervised].tolist() == expected
    # the supervised span is the tail of the sequence, labels equal the input tokens there
    n = int(supervised.sum())
    assert supervised[-n:].all() and not supervised[:-n].any()
    assert row_ids[supervised].tolist() == expected
    assert tok.decode(row_labels[supervised][:-1]).strip() == answer
    # the image slot: T positions right after the system prefix, none of them supervised
    assert int(row_img.sum()) == T and row_img[len(enc.pre) : len(enc.pre) + T].all()
    assert not (row_img & supervised).any()
    # the prompt part decodes to the release's qwen2_base template
    text = tok.decode(row_ids[: len(enc.pre)]) + "<image>" + tok.decode(row_ids[len(enc.pre) + T : -n])
    assert text.removeprefix(tok.bos_token or "") == prompt_text(question)
    # the shorter row is padded on the right with ignored labels and no attention
    short = batch["attention_mask"][1]
    assert (batch["labels"][1][short == 0] == IGNORE).all()


def test_left_padding_for_generation(llm):
    _, tok, _ = llm
    enc = PromptEncoder(tok)
    batch = build_batch(
        [enc.encode("a much longer question here?"), enc.encode("q?")], T, tok.pad_token_id, left_pad=True
    )
    assert (batch["labels"] == IGNORE).all()
    assert batch["attention_mask"][:, -1].all()  # every prompt ends at the last position
    assert batch["attention_mask"][1, 0] == 0


def _batch(tok, n=3):
    enc = PromptEncoder(tok)
    items = [example(a) for a in ("rel_depth", "counting", "color")][:n]
    return build_batch([enc.encode(q, a) for q, a in items], T, tok.pad_token_id)


def test_supervised_logits_equal_full_logits(llm):
    _, tok, _ = llm
    head = build_head(_fresh(llm), 32, lora_r=8, seed=0)
    head.eval()  # no dropout: both computations see the same network
    batch, feats = _batch(tok), torch.randn(3, T, 32)
    fast = head(batch, feats)
    full = head.full_logits_loss(batch, feats)
    assert torch.allclose(fast, full, atol=1e-5), (fast.item(), full.item())
    g_fast = torch.autograd.grad(fast, head.connector[0].weight)[0]
    g_full = torch.autograd.grad(head.full_logits_loss(batch, feats), head.connector[0].weight)[0]
    assert torch.allclose(g_fast, g_full, atol=1e-6)
    # the image tokens matter: other features, other loss
    assert not torch.allclose(head(batch, torch.randn(3, T, 32)), fast)


def test_lora_on_every_block_linear_not_lm_head(tmp_path):
    model, _, _ = load_llm("tiny-random-qwen2")
    head = build_head(model, 16, lora_r=4, seed=0)
    trainable = {n for n, p in head.named_parameters() if p.requires_grad}
    assert all("lora_" in n or n.startswith("connector.") for n in trainable)
    targets = {n.split(".")[-4] for n in trainable if "lora_A" in n}
    assert targets == set(LORA_TARGETS)
    assert not any("lm_head" in n or "embed_tokens" in n for n in trainable)
    cfg = head.llm.peft_config["default"]
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout) == (4, 8, 0.05)
    assert [type(m).__name__ for m in head.connector] == ["Linear", "GELU", "Linear"]
    assert head.connector[0].in_features == 16 and head.connector[2].out_features == 64


def test_same_seed_same_init_and_random_label():
    a = build_head(load_llm("tiny-random-qwen2")[0], 16, lora_r=4, seed=3).trainable_state()
    b = build_head(load_llm("tiny-random-qwen2")[0], 16, lora_r=4, seed=3).trainable_state()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert load_llm("tiny-random-qwen2")[2]["llm_random_weights"] is True


def test_registry_and_clear_errors(monkeypatch):
    assert {"qwen2-0.5b", "qwen2.5-0.5b", "qwen2-7b", "tiny-random-qwen2", "tiny-random-llama"} <= set(LLMS)
    assert resolve_llm("Qwen/Qwen2-0.5B")[0].name == "qwen2-0.5b"
    with pytest.raises(AvaError, match="(?i)did you mean"):
        resolve_llm("qwen2-05b")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(AvaError, match=r"Qwen/Qwen2-0\.5B.*--llm DIR") as e:
        load_llm("qwen2-0.5b")
    assert "hf download Qwen/Qwen2-0.5B" in str(e.value)  # the hub CLI's current name (huggingface_hub >= 0.34)


def test_local_directory_loads_like_a_checkpoint(tmp_path):
    model, tok, _ = load_llm("tiny-random-llama")
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    again, tok2, info = load_llm(str(tmp_path / "m"))
    assert type(again).__name__ == "LlamaForCausalLM" and info["llm_random_weights"] is False
    assert torch.equal(again.lm_head.weight, model.lm_head.weight)
    assert tok2("red blue")["input_ids"] == tok("red blue")["input_ids"]


def test_length_grouped_batches():
    lengths = [10 + (i * 37) % 50 for i in range(203)]
    one = length_grouped_batches(lengths, 8, seed=1, epoch=0, megabatch=4)
    assert one == length_grouped_batches(lengths, 8, seed=1, epoch=0, megabatch=4)
    assert one != length_grouped_batches(lengths, 8, seed=1, epoch=1, megabatch=4)
    assert sorted(i for b in one for i in b) == list(range(203))
    pad = sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in one)
    naive = [list(range(s, min(s + 8, 203))) for s in range(0, 203, 8)]
    pad_naive = sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in naive)
    assert pad < pad_naive / 3
    ranks = [length_grouped_batches(lengths, 4, seed=1, epoch=0, rank=r, world=2) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) and all(len(b) == 4 for r in ranks for b in r)
    covered = {i for r in ranks for b in r for i in b}
    assert covered == set(range(203))


def test_init_from_a_stage2_directory(tmp_path):
    """A user's stage-2 checkpoint: a transformers causal-LM dir + LLaVA's mm_projector.bin (prefixed keys)."""
    from ava.heads.llm.model import Connector
    from ava.heads.llm.runtime import read_init

    model, tok, _ = load_llm("tiny-random-llama")
    model.save_pretrained(tmp_path / "stage2")
    tok.save_pretrained(tmp_path / "stage2")
    conn = Connector(16, 64)
    torch.save(
        {f"model.mm_projector.{k}": v for k, v in conn.state_dict().items()}, tmp_path / "stage2" / "mm_projector.bin"
    )
    llm_dir, state = read_init(str(tmp_path / "stage2"))
    assert llm_dir == str(tmp_path / "stage2")
    assert all(torch.equal(state[k], v) for k, v in conn.state_dict().items())
    (tmp_path / "empty").mkdir()
    with pytest.raises(AvaError, match="no connector weights"):
        read_init(str(tmp_path / "empty"))


def test_option_scoring_with_shared_prompt_cache_equals_full_sequences(llm):
    _, tok, _ = llm
    head = build_head(_fresh(llm), 32, lora_r=8, seed=0)
    head.eval()
    enc = PromptEncoder(tok)
    question, _ = example("orientation")
    options = ["front", "back left", "top", "front right", "left"]
    feats = torch.randn(1, T, 32)
    full = build_batch([enc.encode(question, o) for o in options], T, tok.pad_token_id)
    want = head.sequence_logprob(full, feats.expand(len(options), -1, -1))
    prompt = build_batch([enc.encode(question)], T, tok.pad_token_id)
    got = head.option_logprobs(prompt, feats, [enc.answer_ids(o) for o in options], chunk=2)
    assert torch.allclose(got, want, atol=1e-4), (got, want)


def test_batched_option_scoring_equals_one_sample_at_a_time(llm):
    """Several samples (prompts of different lengths, different option counts) scored in one batch: one forward over
    the left-padded prompts, (sample, option) rows against the shared cache; the same scores as one by one."""
    from ava.heads.llm.data import Collator

    _, tok, _ = llm
    head = build_head(_fresh(llm), 32, lora_r=8, seed=0)
    head.eval()
    enc = PromptEncoder(tok)
    questions = [example("orientation")[0], "short?", example("rel_depth")[0]]
    options = [["front", "back left", "top"], ["yes", "no"], ["left", "front right", "far away at the back", "top"]]
    feats = torch.randn(3, T, 32)
    encoded = [enc.encode(q) for q in questions]
    ids = [[enc.answer_ids(o) for o in opts] for opts in options]
    one_by_one = [
        head.option_logprobs(build_batch([e], T, tok.pad_token_id), feats[i : i + 1], ids[i])
        for i, e in enumerate(encoded)
    ]
    batch = Collator(encoded, T, tok.pad_token_id, left_pad=True)([{"index": i} for i in range(3)])
    assert len({int(n) for n in batch["attention_mask"].sum(1)}) > 1  # really left-padded
    for chunk in (64, 3):  # all rows at once, and rows split across chunks
        got = head.score_options(batch, feats, ids, chunk=chunk)
        for g, w in zip(got, one_by_one, strict=True):
            assert g.shape == w.shape and torch.allclose(g, w, atol=1e-4), (g, w)


def test_eval_batch_sized_to_memory():
    from types import SimpleNamespace

    from ava.heads.llm.evaluate import auto_batch_size

    cfg = SimpleNamespace(
        hidden_size=896,
        num_attention_heads=14,
        num_key_value_heads=2,
        num_hidden_layers=24,
        intermediate_size=4864,
        vocab_size=151936,
    )
    head = SimpleNamespace(base=SimpleNamespace(config=cfg))
    cpu = torch.device("cpu")
    small, large = (auto_batch_size(head, cpu, n, torch.float32) for n in (200_000, 900))
    assert 1 <= small <= large <= 64
    assert auto_batch_size(head, cpu, 10**9, torch.float32) == 1  # never 0, however long


def test_option_scoring_raises_no_transformers_deprecation(llm):
    """The batched scoring (``--decode score``) hands the KV cache over by the name this transformers supports:
    no FutureWarning/DeprecationWarning (``past_key_values`` goes in 5.40) and no deprecation logged."""
    import logging
    import warnings

    from ava.heads.llm.data import Collator

    _, tok, _ = llm
    head = build_head(_fresh(llm), 32, lora_r=8, seed=0).eval()
    enc = PromptEncoder(tok)
    encoded = [enc.encode(q) for q in ("What is nearer?", "short?")]
    ids = [[enc.answer_ids(o) for o in ("front", "back")], [enc.answer_ids(o) for o in ("yes", "no", "maybe")]]
    feats = torch.randn(2, T, 32)
    batch = Collator(encoded, T, tok.pad_token_id, left_pad=True)([{"index": i} for i in range(2)])
    logged: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = logged.append  # type: ignore[method-assign]
    getattr(logging.Logger.warning_once, "cache_clear", lambda: None)()  # transformers logs each message once
    logging.getLogger("transformers").addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            warnings.simplefilter("error", DeprecationWarning)
            scores = head.score_options(batch, feats, ids, chunk=3)
            one = head.option_logprobs(build_batch([encoded[0]], T, tok.pad_token_id), feats[:1], ids[0], chunk=1)
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    assert [s.shape[0] for s in scores] == [2, 3] and torch.allclose(scores[0], one, atol=1e-4)
    assert not [r.getMessage() for r in logged if "deprecat" in r.getMessage()]
