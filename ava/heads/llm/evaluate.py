"""Evaluating a trained LLM head (``ava head eval``): greedy generation, or option scoring for choice abilities.

``decode="generate"``: greedy decoding (no sampling, temperature 0) with a KV cache, prompts left-padded in
batches of similar length; the reply is parsed and scored exactly as ``ava score`` does. Results go to
``results_<split>.json`` / ``predictions_<split>.jsonl``.

``decode="score"``: for choice abilities (options, depth bins), every option's text is scored as the reply
(sum of log-probabilities of its tokens and eos) and the best one is the prediction, so nothing is
unparseable. Other abilities fall back to generation. Results go to ``results_<split>_score.json`` /
``predictions_<split>_score.jsonl`` and say ``"decode": "score"``.

Under ``torchrun`` every rank decodes a slice of the samples; rank 0 gathers, scores and writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ava.config import to_jsonable
from ava.data.format import Dataset, Sample
from ava.errors import AvaError
from ava.heads.llm.config import LLMHeadConfig
from ava.heads.llm.data import Collator
from ava.heads.llm.devices import autocast, init_dist, progress_bar, resolve_dtype, to_device
from ava.heads.llm.prompt import PromptEncoder, prompt_text
from ava.jsonfile import read_json


class SubsetDataset(Dataset):
    """A dataset restricted to some samples (``--max-eval``), so scoring does not count the rest as missing."""

    def __init__(self, root: str | Path, keep: set[tuple[str, str]]) -> None:
        super().__init__(root)
        self.keep = keep

    def samples(self, ava: Any = None, split: str | None = None) -> list[Sample]:
        return [s for s in super().samples(ava, split) if s.key in self.keep]


def load_run_config(run_dir: Path) -> tuple[LLMHeadConfig, dict[str, Any]]:
    """The run's config (checked as a config file is) and run block."""
    from ava.heads.rundir import read_run

    cfg, run = read_run(run_dir, head="llm")
    return LLMHeadConfig(**cfg), run


def eval_samples(dataset: Dataset, abilities: list[str], split: str, max_eval: int | None) -> list[Sample]:
    from ava.heads.targets import stable_order

    out = []
    for a in abilities:
        samples = dataset.samples(a, split=split)
        if max_eval is not None and len(samples) > max_eval:
            samples = sorted(stable_order(samples, "eval")[:max_eval], key=lambda s: s.id)
        out.extend(samples)
    if not out:
        raise AvaError(f"{dataset.root}: no {split!r} samples of {', '.join(abilities)} (run `ava data split`?)")
    return out


def _max_new_tokens(encoder: PromptEncoder, dataset: Dataset, ability: str, samples: list[Sample]) -> int:
    """Room for the longest reference answer or option of this ability (from the train split), plus slack."""
    from ava.abilities import get_ability

    ab = get_ability(ability)
    texts = [s.answer for s in dataset.samples(ability, split="train")[:2000]]
    for s in samples:
        texts.extend(s.options or ab.fixed_options)
    longest = max((len(encoder.answer_ids(t)) for t in texts), default=16)
    return min(int(longest * 1.25) + 4, 256)


def _loader(items: Any, order: list[int], collate: Collator, batch_size: int) -> Any:
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return torch.utils.data.DataLoader(items, batch_sampler=batches, collate_fn=collate)


def _generate(
    head: Any,
    tokenizer: Any,
    source: Any,
    encoded: list,
    idx: list[int],
    max_new: int,
    batch_size: int,
    device: torch.device,
    dtype: torch.dtype,
    bar: Any,
    task: Any,
) -> dict[int, str]:

    order = sorted(idx, key=lambda i: -len(encoded[i].post))
    collate = Collator(encoded, source.num_tokens, tokenizer.pad_token_id, left_pad=True)
    out: dict[int, str] = {}
    for batch in _loader(source.items, order, collate, batch_size):
        batch = to_device(batch, device)
        with autocast(device, dtype):
            new = head.generate(
                batch,
                source.featurize(batch),
                max_new_tokens=max_new,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        for i, row in zip(batch["index"].tolist(), new.tolist(), strict=True):
            out[i] = tokenizer.decode(row, skip_special_tokens=True).strip()
        bar.advance(task, len(new))
    return out


def _score_options(
    head: Any,
    tokenizer: Any,
    encoder: PromptEncoder,
    source: Any,
    samples: list[Sample],
    encoded: list,
    idx: list[int],
    batch_size: int,
    device: torch.device,
    dtype: torch.dtype,
    bar: Any,
    task: Any,
) -> dict[int, str]:
    """The option with the highest log-likelihood as the reply, for each choice question.

    Samples go ``batch_size`` at a time (similar prompt lengths together): one forward over their prompts, then
    every (sample, option) row scored in batches against the shared KV cache (:meth:`LLMHead.score_options`).
    ``encoded[i]`` is sample i's tokenized prompt; each distinct option text is tokenized once.
    """
    from ava.abilities import get_ability
    from ava.abilities.parsers import format_reply
    from ava.heads.targets import question_options

    out: dict[int, str] = {}
    option_ids: dict[str, list[int]] = {}
    texts: dict[int, list[str]] = {}
    for i in idx:
        texts[i] = question_options(get_ability(samples[i].ava), samples[i])
        for o in texts[i]:
            if o not in option_ids:
                option_ids[o] = encoder.answer_ids(o)
    order = sorted(idx, key=lambda i: -len(encoded[i].post))
    collate = Collator(encoded, source.num_tokens, tokenizer.pad_token_id, left_pad=True)
    for batch in _loader(source.items, order, collate, batch_size):
        batch = to_device(batch, device)
        rows = batch["index"].tolist()
        ids = [[option_ids[o] for o in texts[i]] for i in rows]
        with autocast(device, dtype):
            scores = head.score_options(batch, source.featurize(batch), ids, chunk=max(4 * batch_size, 16))
        for i, sc in zip(rows, scores, strict=True):
            best = int(torch.argmax(sc))  # (the first of equal scores, as max() over the options did)
            out[i] = format_reply(get_ability(samples[i].ava), best, options=texts[i])
        bar.advance(task, len(rows))
    return out


def auto_batch_size(head: Any, device: torch.device, tokens: int, dtype: torch.dtype) -> int:
    """Samples per evaluation batch from the memory at hand: what one sample of ``tokens`` tokens needs (its KV
    cache, the widest activations of a layer, a layer's attention scores, the last position's logits) into half
    the free CUDA memory (at most 256), or a quarter of the available host memory on a CPU (at most 64: a CPU
    gains little from more)."""
    cfg = head.base.config
    elem = 2 if dtype in (torch.bfloat16, torch.float16) else 4
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    per_token = 2 * cfg.num_hidden_layers * kv_heads * head_dim * elem  # the KV cache
    per_token += (6 * cfg.hidden_size + 3 * getattr(cfg, "intermediate_size", 4 * cfg.hidden_size)) * elem
    # + the attention scores of a layer if SDPA materializes them (a left-padded batch has a mask: the math path)
    need = tokens * per_token + cfg.num_attention_heads * tokens * tokens * 4 + 2 * cfg.vocab_size * 4
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget, cap = free // 2, 256
    else:
        import os

        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            free = 4 << 30
        budget, cap = free // 4, 64
    return int(max(1, min(cap, budget // max(need, 1))))


def evaluate(
    run_dir: str | Path,
    split: str = "test",
    decode: str = "generate",
    max_eval: int | None = None,
    *,
    batch_size: int | None = None,
    device: str | None = None,
    progress: bool = True,
    features: str | None = None,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Decode the ``split`` samples of a run's abilities, score them like ``ava score``, write the results.

    ``trust_remote_code`` is the command line's: the run's recorded value must equal it (a run directory never
    decides that code runs); the data and cache must be those the run was trained on
    (:func:`ava.heads.rundir.identity.check_eval_target`)."""
    from ava.abilities import get_ability
    from ava.heads.llm.runtime import feature_source, load_trained
    from ava.heads.rundir import check_cache_key, check_eval_target, check_recorded_options

    if decode not in ("generate", "score"):
        raise AvaError(f"--decode {decode!r}: use 'generate' or 'score'")
    run_dir = Path(run_dir)
    cfg, run = load_run_config(run_dir)
    check_recorded_options(run_dir, to_jsonable(cfg), trust_remote_code)
    dist, dev = init_dist(device or cfg.device)
    dtype = resolve_dtype(cfg.dtype, dev)
    dataset = Dataset(cfg.data)
    abilities = list(run["abilities"])
    results_name = f"results_{split}.json" if decode == "generate" else f"results_{split}_score.json"
    check_eval_target(run_dir, run, dataset, abilities, [results_name])
    samples = eval_samples(dataset, abilities, split, max_eval)
    source = feature_source(cfg, dataset, samples, dev, features=features, resident=True)
    check_cache_key(run_dir, run, source.info.get("cache_key"))
    head, tokenizer = load_trained(run_dir, cfg, dev, source.dim, dtype)
    encoder = PromptEncoder(tokenizer)
    encoded = [encoder.encode(s.question) for s in samples]
    mine = list(range(dist.rank, len(samples), dist.world))
    longest = max(e.length(source.num_tokens) for e in encoded) + 64  # (+ the reply or options)
    bs = batch_size or cfg.eval_batch_size or auto_batch_size(head, dev, longest, dtype)
    replies: dict[int, str] = {}
    with progress_bar(progress and dist.main, training=False) as bar:
        task = bar.add_task(f"eval {split} ({decode})", total=len(mine))
        for a in abilities:
            idx = [i for i in mine if samples[i].ava == a]
            if decode == "score" and get_ability(a).is_choice:
                replies.update(
                    _score_options(head, tokenizer, encoder, source, samples, encoded, idx, bs, dev, dtype, bar, task)
                )
            else:
                a_samples = [samples[i] for i in idx]
                max_new = _max_new_tokens(encoder, dataset, a, a_samples)
                replies.update(_generate(head, tokenizer, source, encoded, idx, max_new, bs, dev, dtype, bar, task))
    if dist.world > 1:
        parts: list[Any] = [None] * dist.world
        torch.distributed.all_gather_object(parts, replies)
        replies = {k: v for p in parts for k, v in p.items()}
    if not dist.main:
        return {}
    return _write(run_dir, cfg, run, samples, replies, split, decode, max_eval, abilities)


def _write(
    run_dir: Path,
    cfg: LLMHeadConfig,
    run: dict,
    samples: list[Sample],
    replies: dict[int, str],
    split: str,
    decode: str,
    max_eval: int | None,
    abilities: list[str],
) -> dict[str, Any]:
    from ava.metrics.scoring import score_predictions, write_results

    keep = {s.key for s in samples}
    dataset = SubsetDataset(cfg.data, keep) if max_eval is not None else Dataset(cfg.data)
    predictions = {samples[i].key: r for i, r in replies.items()}
    run = {**run, "decode": decode, "max_eval": max_eval}
    report = score_predictions(dataset, predictions, abilities=abilities, split=split, run=run, config=to_jsonable(cfg))
    prompts = {s.key: prompt_text(s.question) for s in samples}
    for rec in report.records:
        rec["prompt"] = prompts.get((rec["ava"], rec["id"]))
        rec["decode"] = decode
    report.results["decode"] = decode
    write_results(report, run_dir, split if decode == "generate" else f"{split}_score")
    return report.results


def read_results(run_dir: str | Path, split: str = "test", decode: str = "generate") -> dict[str, Any]:
    name = f"results_{split}.json" if decode == "generate" else f"results_{split}_score.json"
    return read_json(Path(run_dir) / name)
