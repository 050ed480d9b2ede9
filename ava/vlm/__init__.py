"""Whole vision-language models (LLaVA, LLaVA-NeXT, Qwen2-VL / Qwen2.5-VL, Idefics, PaliGemma, ... through
transformers' image-text-to-text classes) answering the same questions as the heads, so a VLM's replies are scored
by ``ava score`` and shown in ``ava report`` beside the heads of its own encoder (head ``vlm:<model>``).

:mod:`ava.vlm.model` loads a checkpoint and generates greedily in batches; :mod:`ava.vlm.answer` is
``ava vlm answer``: a run directory filled sample by sample (resumable), then scored.
"""

from __future__ import annotations

from ava.vlm.answer import AnswerConfig, AnswerResult, answer

__all__ = ["AnswerConfig", "AnswerResult", "answer"]
