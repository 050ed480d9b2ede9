"""The LLMs a head can use: short names for hub checkpoints, and tiny random models for tests.

``load_llm(name)`` accepts a registry name (``qwen2-0.5b``), a hub id (``Qwen/Qwen2-0.5B``) or a local
directory holding a causal LM saved with ``save_pretrained`` (config.json, *.safetensors, tokenizer files).
Random entries (``tiny-random-qwen2``, ``random-qwen2-0.5b``, ...) are built from a config of the real
transformers class with seeded random weights and a byte-level BPE tokenizer trained offline, saved once
with ``save_pretrained`` under ``$AVA_HOME/llm/`` and loaded back through the same path as a real
checkpoint. Results made with them carry ``"llm_random_weights": true``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ava.errors import AvaError
from ava.home import ava_home
from ava.registry import Registry

SYSTEM_PROMPT = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
# Bump when the recipe of a random model or its tokenizer changes, so stale builds are not reused.
_RANDOM_RECIPE = 3


@dataclass(frozen=True)
class LLMSpec:
    name: str
    hub_id: str | None = None  # None for random models
    arch: str = "qwen2"  # "qwen2" or "llama": which config class a random build uses
    template: str = "qwen2_base"  # the prompt template (ava.heads.llm.prompt.TEMPLATES) the LLM is trained with
    random_config: dict[str, Any] = field(default_factory=dict)  # non-empty: a random-weight build
    description: str = ""

    @property
    def random_weights(self) -> bool:
        return bool(self.random_config)


LLMS: Registry[LLMSpec] = Registry("LLM")


def _r(spec: LLMSpec, aliases: tuple[str, ...] = ()) -> None:
    LLMS.register(spec.name, spec, aliases=aliases)


_r(LLMSpec("qwen2-0.5b", "Qwen/Qwen2-0.5B", description="the paper's LLM"), aliases=("Qwen/Qwen2-0.5B",))
_r(LLMSpec("qwen2-1.5b", "Qwen/Qwen2-1.5B"), aliases=("Qwen/Qwen2-1.5B",))
_r(LLMSpec("qwen2-7b", "Qwen/Qwen2-7B"), aliases=("Qwen/Qwen2-7B",))
# The paper's 7B comparison (a 0.5B LLM ranks VFMs like this 7B one): Vicuna-1.5-7B, with LLaVA's vicuna_v1 prompt.
_r(
    LLMSpec(
        "vicuna-1.5-7b",
        "lmsys/vicuna-7b-v1.5",
        arch="llama",
        template="vicuna_v1",
        description="the paper's 7B comparison (LLaVA-1.5's LLM)",
    ),
    aliases=("lmsys/vicuna-7b-v1.5", "vicuna-7b-v1.5"),
)
_r(LLMSpec("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B"), aliases=("Qwen/Qwen2.5-0.5B",))
_r(LLMSpec("qwen2.5-1.5b", "Qwen/Qwen2.5-1.5B"), aliases=("Qwen/Qwen2.5-1.5B",))
_r(LLMSpec("qwen2.5-7b", "Qwen/Qwen2.5-7B"), aliases=("Qwen/Qwen2.5-7B",))
_r(LLMSpec("llama-3.2-1b", "meta-llama/Llama-3.2-1B", arch="llama"), aliases=("meta-llama/Llama-3.2-1B",))
# initializer_range 0.2, not 0.02: the output layer of a frozen random LM bounds its logits by |h| |e|; at 0.02
# the largest logit is ~1 and no answer can be fit, at 0.2 a LoRA-tuned tiny model can become confident.
_TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    vocab_size=512,
    initializer_range=0.2,
)
_r(
    LLMSpec(
        "tiny-random-qwen2",
        arch="qwen2",
        random_config={**_TINY, "tie_word_embeddings": True},
        description="2 layers, hidden 64, random weights: for tests",
    )
)
_r(
    LLMSpec(
        "tiny-random-llama",
        arch="llama",
        template="vicuna_v1",
        random_config=dict(_TINY),
        description="2 layers, hidden 64, random weights, Vicuna's prompt: for tests",
    )
)
# Qwen2-0.5B's exact shapes at random weights: speed depends on shapes only (benchmarks).
_r(
    LLMSpec(
        "random-qwen2-0.5b",
        arch="qwen2",
        description="Qwen2-0.5B shapes, random weights: for benchmarks",
        random_config=dict(
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            vocab_size=151936,
            max_position_embeddings=32768,
            rope_theta=1000000.0,
            tie_word_embeddings=True,
        ),
    )
)


TEMPLATE_FILE = "ava_llm.json"  # written beside a saved LLM (stage 2) to say which prompt template it was tuned with


def template_of(tokenizer: Any, name: str | None = None) -> str:
    """The prompt template of an LLM: its registry entry's, else the one a stage-2 directory recorded in
    :data:`TEMPLATE_FILE`, else ``vicuna_v1`` for a Vicuna checkpoint, else ``qwen2_base``."""
    import json

    for candidate in (name, getattr(tokenizer, "name_or_path", None)):
        if not candidate:
            continue
        if candidate in LLMS:
            return LLMS.get(candidate).template
        path = Path(str(candidate)) / TEMPLATE_FILE
        if path.is_file():
            try:
                return str(json.loads(path.read_text())["template"])
            except (OSError, ValueError, KeyError) as e:
                raise AvaError(f"{path}: not a valid LLM description ({e})") from e
        if "vicuna" in str(candidate).lower():
            return "vicuna_v1"
    for spec in (LLMS.get(n) for n in LLMS):
        if spec.random_weights and str(getattr(tokenizer, "name_or_path", "")).rstrip("/").endswith(
            f"/{spec.name}-v{_RANDOM_RECIPE}"
        ):
            return spec.template
    return "qwen2_base"


def resolve_llm(name: str) -> tuple[LLMSpec, str]:
    """(spec, where to load from): a registry name, a local directory, or a hub id (``org/name`` or ``hf:ID``)."""
    if name.startswith("hf:"):
        name = name[3:]
    path = Path(name).expanduser()
    if path.is_dir():
        return LLMSpec(name=str(path.resolve()), hub_id=None, description="local directory"), str(path.resolve())
    if name in LLMS:
        spec = LLMS.get(name)
        return spec, (str(build_random_llm(spec)) if spec.random_weights else spec.hub_id or name)
    if "/" in name and not name.startswith((".", "/")):
        return LLMSpec(name=name, hub_id=name), name
    LLMS.canonical(name)  # raises "unknown LLM ... did you mean"
    raise AssertionError("unreachable")


def _tokenizer_corpus() -> list[str]:
    """Text the tiny tokenizer is trained on: the prompt, every ability's questions and options, digits."""
    from ava import abilities as ab

    lines = [SYSTEM_PROMPT, "USER: ASSISTANT:", "0123456789 .,-:;()[]{}", "abcdefghijklmnopqrstuvwxyz"]
    for key in ab.ABILITY_KEYS:
        a = ab.get_ability(key)
        lines.extend(a.question_templates)
        lines.extend(a.fixed_options)
    lines.extend(ab.DTD_TEXTURES + ab.INDOOR_DEPTH_BINS + ab.OUTDOOR_DEPTH_BINS)
    lines.extend(f"[0.{i:03d}, 0.{(i * 7) % 1000:03d}] ({i}, {255 - i}, {i // 2}) {i}" for i in range(0, 256, 3))
    return lines


def build_tokenizer(vocab_size: int, arch: str) -> Any:
    """A small byte-level BPE tokenizer (any text encodes; no download), trained in memory and deterministic."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>"] if arch == "qwen2" else ["</s>", "<s>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=min(vocab_size, 4096),
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_tokenizer_corpus(), trainer=trainer)
    if arch == "qwen2":  # Qwen2 base: eos is <|endoftext|>, also used for padding; no bos
        return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", bos_token="<s>", pad_token="</s>")


def build_random_llm(spec: LLMSpec, root: Path | None = None) -> Path:
    """Build (once) and save a random-weight model of ``spec``; returns its directory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    out = (root or ava_home() / "llm") / f"{spec.name}-v{_RANDOM_RECIPE}"
    if (out / "config.json").is_file():
        return out
    tokenizer = build_tokenizer(spec.random_config["vocab_size"], spec.arch)
    cfg_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if spec.arch == "qwen2" else (LlamaConfig, LlamaForCausalLM)
    # No pad_token_id in the model config: it would make the embedding row of pad (= eos here) zero, and with
    # tied embeddings a frozen zero row means eos can never be predicted. Padding is masked anyway.
    config = cfg_cls(**spec.random_config, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    model = model_cls(config)
    torch.random.set_rng_state(state)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, out)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub (or ``HF_ENDPOINT``) answers, so offline use fails fast, not after retries."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def _from_pretrained(source: str, dtype: Any, local_only: bool) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # ava's own progress bars report the work; loading is quick
    # trust_remote_code pinned: an LLM's own Python code never runs (and transformers never asks on stdin)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only, trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=dtype, use_safetensors=True, local_files_only=local_only, trust_remote_code=False
    )
    return model, tokenizer


def load_llm(name: str, *, dtype: Any = None, device: str = "cpu") -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, info) of a causal LM; info says its name, source and whether its weights are random.

    A hub id is looked up in the local Hugging Face cache first and downloaded only when the hub answers.
    """
    import torch

    spec, source = resolve_llm(name)
    dtype = dtype or torch.float32
    try:
        try:
            model, tokenizer = _from_pretrained(source, dtype, local_only=True)
        except OSError:
            if Path(source).is_dir() or not _hub_reachable():
                raise
            model, tokenizer = _from_pretrained(source, dtype, local_only=False)
    except (OSError, ValueError) as e:
        where = spec.hub_id or source
        raise AvaError(
            f"cannot load the LLM {name!r} ({where}): {str(e).splitlines()[0]}\nIt is not in the local Hugging Face "
            f"cache and the hub cannot be reached. Download it where there is internet (e.g. `hf download "
            f"{where} --local-dir DIR`) and pass the directory: --llm DIR (a save_pretrained directory "
            "with config.json, *.safetensors and the tokenizer files)."
        ) from e
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise AvaError(f"the tokenizer of LLM {name!r} ({source}) has no eos token; the head needs one")
    info = {
        "llm": spec.name,
        "llm_source": spec.hub_id or source,
        "llm_random_weights": spec.random_weights,
        "prompt_template": template_of(tokenizer, name),
    }
    tuned = _tuned_from(source)
    if tuned:  # a stage-2 directory: the LLM it was tuned from, and random weights stay random
        info["llm_base"] = str(tuned.get("tuned_from") or "")
        info["llm_random_weights"] = bool(spec.random_weights or tuned.get("llm_random_weights"))
    return model.to(device), tokenizer, info


def _tuned_from(source: str) -> dict[str, Any]:
    """What a stage-2 directory's :data:`TEMPLATE_FILE` says it was tuned from (empty for any other source)."""
    import json

    path = Path(source) / TEMPLATE_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise AvaError(f"{path}: not a valid LLM description ({e})") from e
    return data if isinstance(data, dict) and "tuned_from" in data else {}
