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
    """Token ids of one sample around its image slot; the image occupies ``num_image_tokens`` positions.

    A multi-turn conversation (stage 2) keeps its earlier replies inside ``post``, supervised through
    ``post_labels``; a conversation without an image (``image=False``) has no image slot at all.
    """

    pre: list[int]  # everything before the image
    post: list[int]  # after the image, up to and including the last "ASSISTANT:"
    answer: list[int]  # " {answer}" + eos (empty at evaluation)
    post_labels: list[int] | None = None  # labels of ``post`` (None: none supervised)
    image: bool = True

    def length(self, num_image_tokens: int) -> int:
        return len(self.pre) + (num_image_tokens if self.image else 0) + len(self.post) + len(self.answer)


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

    def encode_turns(self, turns: list[tuple[str, str]], *, image: bool = True) -> Encoded:
        """A multi-turn conversation ``[(question, reply), ...]``: every reply (and its eos) carries loss.

        The text is the template's, turn after turn (LLaVA's ``vicuna_v1`` layout)::

            SYSTEM USER: <image>\\n{q1} ASSISTANT: {a1}<eos>USER: {q2} ASSISTANT: {a2}<eos>

        Without an image, the first question follows "USER: " directly.
        """
        if not turns:
            raise AvaError("a conversation needs at least one question and reply")
        post: list[int] = []
        labels: list[int] = []
        for i, (question, reply) in enumerate(turns):
            lead = ("\n" if image else "") if i == 0 else f"{self.user}: "
            ask = _ids(self.tokenizer, f"{lead}{question} {self.assistant}:")
            if i == len(turns) - 1:
                post += ask
                labels += [IGNORE] * len(ask)
                return Encoded(self.pre, post, self.answer_ids(reply), labels, image)
            said = self.answer_ids(reply)
            post += ask + said
            labels += [IGNORE] * len(ask) + said
        raise AssertionError("unreachable")

    def answer_ids(self, answer: str) -> list[int]:
        """The supervised tokens of a reply: " {answer}" + eos."""
        return _ids(self.tokenizer, f" {answer}") + [self.eos]


def build_batch(encoded: list[Encoded], num_image_tokens: int, pad_id: int, *, left_pad: bool = False) -> dict:
    """Pad a batch: input_ids (image slots hold ``pad_id``), image_mask, attention_mask and labels.

    Training pads on the right; generation pads on the left so every prompt ends at the last position. A row
    without an image (``Encoded.image`` False) has no image slots; its features must come after the image rows'
    (``LLMHead.embed`` fills the slots in order), see :func:`image_rows_first`.
    """
    import torch

    rows = []
    for e in encoded:
        slots = num_image_tokens if e.image else 0
        ids = e.pre + [pad_id] * slots + e.post + e.answer
        img = [0] * len(e.pre) + [1] * slots + [0] * (len(e.post) + len(e.answer))
        post_labels = e.post_labels if e.post_labels is not None else [IGNORE] * len(e.post)
        lab = [IGNORE] * (len(e.pre) + slots) + post_labels + e.answer
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


def image_rows_first(features: Any, image_mask: Any) -> Any:
    """``features`` [B, T, D] reordered so the rows that have image slots come first, in order: the order in
    which ``masked_scatter`` fills a batch's slots when some rows (text-only conversations) have none."""
    import torch

    has = image_mask.any(dim=1)
    if bool(has.all()):
        return features
    return torch.cat([features[has], features[~has]])
