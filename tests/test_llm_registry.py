"""The LLM registry matches the paper: Vicuna-1.5-7B (its own vicuna_v1 prompt) is the 7B comparison."""

from __future__ import annotations

import json
import os

import pytest

from ava.errors import AvaError
from ava.heads.llm.llms import LLMS, TEMPLATE_FILE, load_llm, resolve_llm, template_of
from ava.heads.llm.prompt import TEMPLATES, PromptEncoder, prompt_text


@pytest.fixture(autouse=True, scope="module")
def _home(tmp_path_factory):
    os.environ.setdefault("AVA_HOME", str(tmp_path_factory.getbasetemp() / "ava_home"))


def test_vicuna_is_the_papers_7b_comparison_and_qwen2_7b_is_not():
    spec = resolve_llm("lmsys/vicuna-7b-v1.5")[0]
    assert spec.name == "vicuna-1.5-7b" and spec.hub_id == "lmsys/vicuna-7b-v1.5"
    assert spec.arch == "llama" and spec.template == "vicuna_v1" and "7B comparison" in spec.description
    assert "comparison" not in LLMS.get("qwen2-7b").description
    assert [n for n in LLMS if "7B comparison" in LLMS.get(n).description] == ["vicuna-1.5-7b"]
    assert LLMS.get("qwen2-0.5b").template == "qwen2_base"


def test_vicuna_prompt_starts_with_bos_and_ends_replies_with_eos():
    model, tok, info = load_llm("tiny-random-llama")  # a Llama tokenizer (<s>, </s>) like Vicuna's
    assert info["prompt_template"] == "vicuna_v1"
    enc = PromptEncoder(tok)
    assert enc.template.name == "vicuna_v1"
    e = enc.encode("How many cats?", "3")
    assert e.pre[0] == tok.bos_token_id and e.answer[-1] == tok.convert_tokens_to_ids("</s>")
    assert tok.decode(e.pre[1:]) + "<image>" + tok.decode(e.post) == prompt_text("How many cats?")
    _, qtok, qinfo = load_llm("tiny-random-qwen2")
    assert qinfo["prompt_template"] == "qwen2_base" and PromptEncoder(qtok).pre[0] != qtok.eos_token_id
    with pytest.raises(AvaError, match="vicuna_v1.*eos"):
        PromptEncoder(qtok, template="vicuna_v1")  # a Qwen2 tokenizer has no </s>
    with pytest.raises(AvaError, match="unknown prompt template"):
        PromptEncoder(qtok, template="chatml")
    assert set(TEMPLATES) >= {"qwen2_base", "vicuna_v1"}


def test_a_saved_llm_directory_keeps_its_template(tmp_path):
    model, tok, _ = load_llm("tiny-random-llama")
    model.save_pretrained(tmp_path / "stage2")
    tok.save_pretrained(tmp_path / "stage2")
    (tmp_path / "stage2" / TEMPLATE_FILE).write_text(json.dumps({"template": "vicuna_v1"}))
    _, tok2, info = load_llm(str(tmp_path / "stage2"))
    assert info["prompt_template"] == "vicuna_v1" and template_of(tok2) == "vicuna_v1"
