"""Loading an image-text-to-text checkpoint and generating replies: greedy (no sampling, so scores repeat),
batched with left padding, the question in the checkpoint's own chat template with the image before it.

Only safetensors weights load, and a checkpoint's own Python code runs only with ``trust_remote_code`` (the
command's ``--trust-remote-code``); a checkpoint whose processor cannot take images is refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ava.errors import AvaError

if TYPE_CHECKING:
    from PIL import Image

DTYPES = ("auto", "fp32", "bf16", "fp16")


def model_name(model: str) -> str:
    """How reports name a VLM: a hub id as it is, a directory by its last part."""
    path = Path(model).expanduser()
    return path.resolve().name if path.is_dir() else model


def model_identity(model: str) -> str:
    """``sha256:...`` of a local checkpoint's safetensors and config, or ``hub:<id>`` for a hub id."""
    path = Path(model).expanduser()
    if path.is_dir():
        from ava.vfm.weights import locate

        return locate(str(path), key=model).identity
    return f"hub:{model}"


@dataclass
class VLM:
    """A loaded image-text-to-text model and its processor."""

    name: str
    identity: str
    model: Any
    processor: Any
    device: str

    def prompt(self, question: str) -> str:
        """The question as the checkpoint's chat template asks it, the image first (the release's ``<image>\\n``)."""
        if getattr(self.processor, "chat_template", None):
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
            return self.processor.apply_chat_template(messages, add_generation_prompt=True)
        token = getattr(self.processor, "image_token", None)
        return f"{token}\n{question}" if token else question

    def generate(self, images: Sequence[Image.Image], questions: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy replies, one per (image, question), decoded without the prompt and special tokens."""
        import torch

        prompts = [self.prompt(q) for q in questions]
        try:
            enc = self.processor(images=list(images), text=prompts, return_tensors="pt", padding=True)
        except (ValueError, TypeError, KeyError) as e:
            raise AvaError(
                f"the processor of {self.name} cannot prepare an image and a question: "
                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
            ) from e
        enc = {k: (v.to(self.device) if hasattr(v, "to") else v) for k, v in enc.items()}
        if "pixel_values" in enc and enc["pixel_values"].is_floating_point():
            enc["pixel_values"] = enc["pixel_values"].to(self.model.dtype)
        tok = self.processor.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        with torch.inference_mode():
            out = self.model.generate(
                **enc, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=pad
            )
        new = out[:, enc["input_ids"].shape[1] :]
        return [r.strip() for r in self.processor.batch_decode(new, skip_special_tokens=True)]


def load_vlm(model: str, *, device: str = "cpu", dtype: str = "auto", trust_remote_code: bool = False) -> VLM:
    """Load ``model`` (hub id or directory) with ``AutoModelForImageTextToText`` and ``AutoProcessor``."""
    import torch
    import transformers

    if dtype not in DTYPES:
        raise AvaError(f"unknown --dtype {dtype!r}; use {', '.join(DTYPES)}")
    from ava.vfm.weights import looks_like_path

    path = Path(model).expanduser()
    if not path.is_dir() and looks_like_path(model):
        raise AvaError(f"VLM checkpoint directory {model} does not exist")
    source = str(path) if path.is_dir() else model
    kw = {"trust_remote_code": trust_remote_code}
    try:
        config = transformers.AutoConfig.from_pretrained(source, **kw)
        processor = transformers.AutoProcessor.from_pretrained(source, **kw)
    except ValueError as e:
        if "trust_remote_code" in str(e):
            raise AvaError(
                f"{model} needs its own Python code to load; pass --trust-remote-code only if you trust it"
            ) from e
        raise AvaError(f"{model}: cannot read its config or processor ({str(e).splitlines()[0]})") from e
    except OSError as e:
        raise AvaError(f"cannot load VLM {model}: {str(e).splitlines()[0]}") from e
    if getattr(processor, "image_processor", None) is None or getattr(processor, "tokenizer", None) is None:
        raise AvaError(
            f"the processor of {model} ({type(processor).__name__}) cannot take images and text; "
            "`ava vlm answer` needs an image-text-to-text checkpoint (LLaVA, Qwen2-VL, Idefics, ...)"
        )
    torch_dtype = {"auto": "auto", "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    try:
        net = transformers.AutoModelForImageTextToText.from_pretrained(
            source, dtype=torch_dtype, use_safetensors=True, **kw
        )
    except ValueError as e:
        raise AvaError(
            f"{model} ({type(config).__name__}) is not an image-text-to-text model transformers can load "
            f"({str(e).splitlines()[0]})"
        ) from e
    processor.tokenizer.padding_side = "left"  # generation continues every prompt at its end
    return VLM(model_name(model), model_identity(model), net.eval().to(device), processor, device)
