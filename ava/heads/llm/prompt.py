"""The release's ``qwen2_base`` prompt (and LLaVA's ``vicuna_v1``), tokenized in segments so the label mask is exact.

A training sequence is::

    [bos] SYSTEM " USER: " <image tokens x T> "\\n{question} ASSISTANT:" " {answer}" <eos>

Both templates (:data:`TEMPLATES`) write this text; they differ in the tokens around it: ``qwen2_base`` ends a
reply with Qwen2's ``<|endoftext|>`` and has no bos, ``vicuna_v1`` (Vicuna-1.5, LLaVA-1.5) starts with ``<s>``
and ends a reply with ``</s>``. The encoder checks that the tokenizer has the template's tokens.

Segments are tokenized separately and concatenated, so the image slot and the answer span are known
exactly (no re-tokenization guesswork at the boundaries), and the prompt seen at evaluation is
token-for-token the training prompt without the answer. Only the answer and eos carry loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ava.errors import AvaError
from ava.heads.llm.llms import SYSTEM_PROMPT, template_of

IGNORE = -100
IMAGE_TOKEN = "<image>"


@dataclass(frozen=True)
class Template:
    """A conversation template: system line, role names, and the special tokens around a reply."""

    name: str
    system: str
    user: str = "USER"
    assistant: str = "ASSISTANT"
    eos: str | None = None  # the reply terminator the LLM was tuned with (None: the tokenizer's eos, whatever it is)
    bos: bool = False  # whether a sequence starts with the tokenizer's bos


TEMPLATES = {
    "qwen2_base": Template("qwen2_base", SYSTEM_PROMPT, eos=None, bos=False),
    "vicuna_v1": Template("vicuna_v1", SYSTEM_PROMPT, eos="</s>", bos=True),
}


def get_template(name: str) -> Template:
    if name not in TEMPLATES:
        raise AvaError(f"unknown prompt template {name!r}: choose one of {', '.join(TEMPLATES)}")
    return TEMPLATES[name]


@dataclass
class Encoded:
    """Token ids of one sample around its image slot; the image occupies ``num_image_tokens`` positions."""

    pre: list[int]  # everything before the image
    post: list[int]  # after the image, up to and including "ASSISTANT:"
    answer: list[int]  # " {answer}" + eos (empty at evaluation)

    def length(self, num_image_tokens: int) -> int:
        return len(self.pre) + num_image_tokens + len(self.post) + len(self.answer)


def prompt_text(question: str, answer: str | None = None) -> str:
    """The prompt as text (for logs and predictions files), with ``<image>`` where the patch tokens go."""
    text = f"{SYSTEM_PROMPT} USER: {IMAGE_TOKEN}\n{question} ASSISTANT:"
    return text if answer is None else f"{text} {answer}"


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


class PromptEncoder:
    """Tokenizes questions and answers; caches the fixed system prefix.

    ``template`` names one of :data:`TEMPLATES`; by default the LLM's own (:func:`ava.heads.llm.llms.template_of`).
    """

    def __init__(self, tokenizer: Any, template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.template = get_template(template or template_of(tokenizer))
        t = self.template
        if t.eos is not None and tokenizer.eos_token != t.eos:
            raise AvaError(
                f"prompt template {t.name!r} ends replies with {t.eos!r}, but this tokenizer's eos is "
                f"{tokenizer.eos_token!r}: use the template of this LLM"
            )
        bos = tokenizer.bos_token_id
        lead = [bos] if bos is not None and bos != tokenizer.eos_token_id and (t.bos or t.eos is None) else []
        self.pre = lead + _ids(tokenizer, f"{t.system} {t.user}: ")
        self.user, self.assistant = t.user, t.assistant
        self.eos = tokenizer.eos_token_id

    def encode(self, question: str, answer: str | None = None) -> Encoded:
        post = _ids(self.tokenizer, f"\n{question} {self.assistant}:")
        ans = [] if answer is None else _ids(self.tokenizer, f" {answer}") + [self.eos]
        return Encoded(pre=self.pre, post=post, answer=ans)

    def answer_ids(self, answer: str) -> list[int]:
        """The supervised tokens of a reply: " {answer}" + eos."""
        return _ids(self.tokenizer, f" {answer}") + [self.eos]


def build_batch(encoded: list[Encoded], num_image_tokens: int, pad_id: int, *, left_pad: bool = False) -> dict:
    """Pad a batch: input_ids (image slots hold ``pad_id``), image_mask, attention_mask and labels.

    Training pads on the right; generation pads on the left so every prompt ends at the last position.
    """
    import torch

    rows = []
    for e in encoded:
        ids = e.pre + [pad_id] * num_image_tokens + e.post + e.answer
        img = [0] * len(e.pre) + [1] * num_image_tokens + [0] * (len(e.post) + len(e.answer))
        lab = [IGNORE] * (len(ids) - len(e.answer)) + e.answer
        rows.append((ids, img, lab))
    width = max(len(r[0]) for r in rows)
    out = {
        k: torch.full((len(rows), width), v, dtype=torch.long)
        for k, v in (("input_ids", pad_id), ("labels", IGNORE), ("image_mask", 0), ("attention_mask", 0))
    }
    for i, (ids, img, lab) in enumerate(rows):
        sl = slice(width - len(ids), width) if left_pad else slice(0, len(ids))
        out["input_ids"][i, sl] = torch.tensor(ids)
        out["labels"][i, sl] = torch.tensor(lab)
        out["image_mask"][i, sl] = torch.tensor(img)
        out["attention_mask"][i, sl] = 1
    out["image_mask"] = out["image_mask"].bool()
    return out
