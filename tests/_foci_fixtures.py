"""Tiny random image-text checkpoints (CLIPModel, SiglipModel) saved with ``save_pretrained`` beside an offline
tokenizer (characters, no merges) and an image processor, loaded back through the paths a real checkpoint takes;
and a small choice dataset with many classes for the option miners. Everything here has RANDOM weights."""

from __future__ import annotations

import random
import string
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from ava.abilities import format_options, get_ability
from ava.data.format import DatasetWriter, Sample

SPECIALS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]


def char_tokenizer(extra: list[str] | None = None, eos: bool = True):
    """A fast tokenizer over single characters (BPE without merges), [BOS] ... [EOS] around every text (``eos``
    False: [BOS] only, as a generation prompt wants)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if not c.isspace()]
    vocab = {t: i for i, t in enumerate([*SPECIALS, *(extra or []), *chars])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[BOS] $A [EOS]" if eos else "[BOS] $A",
        special_tokens=[("[BOS]", vocab["[BOS]"]), ("[EOS]", vocab["[EOS]"])],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        bos_token="[BOS]",
        eos_token="[EOS]",
        additional_special_tokens=extra or None,
    )
    return fast, vocab


def save_tiny_image_text(path: Path, kind: str = "clip", seed: int = 0) -> Path:
    """A tiny random CLIPModel, SiglipModel or Tipsv2Model (``kind`` clip, siglip, tipsv2) with its tokenizer and
    image processor in ``path``."""
    import torch
    import transformers as T

    tok, vocab = char_tokenizer()
    text = {
        "vocab_size": len(vocab),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "max_position_embeddings": 64,
        "pad_token_id": 0,
        "bos_token_id": 2,
        "eos_token_id": 3,
    }
    # the tiny-clip / tiny-siglip registry shapes (56 px, patch 14, 2 layers), so ``tiny-clip@DIR`` extracts too
    vision = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": 56,
        "patch_size": 14,
    }
    torch.manual_seed(seed)
    if kind == "clip":
        model = T.CLIPModel(T.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
        proc = T.CLIPImageProcessor(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    elif kind == "siglip":
        model = T.SiglipModel(T.SiglipConfig(text_config=text, vision_config=vision))
        proc = T.SiglipImageProcessor(size={"height": 56, "width": 56})
    else:  # TIPSv2
        text = {k: v for k, v in text.items() if not k.endswith("token_id")}
        model = T.Tipsv2Model(T.Tipsv2Config(text_config=text, vision_config=vision))
        proc = T.CLIPImageProcessor(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    model.save_pretrained(path)
    tok.save_pretrained(path)
    proc.save_pretrained(path)
    return path


COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 200, 30),
    "blue": (30, 30, 220),
    "yellow": (230, 220, 30),
    "purple": (150, 30, 180),
    "orange": (240, 140, 20),
    "cyan": (30, 210, 210),
    "grey": (128, 128, 128),
}


def make_choice_data(root: Path, per_class: int = 5, seed: int = 0) -> Path:
    """A split ``recognition`` dataset: 8 colour classes (a filled square of the class colour), every question
    listing all 8 options; 1 in 5 samples per class is test. Plus a ``counting`` ability (not a choice)."""
    rng = random.Random(seed)
    ability = get_ability("recognition")
    classes = list(COLOURS)
    with DatasetWriter(
        root, info={"source": "foci test fixture", "synthetic": True, "split": {"made_by": "synthetic", "seed": seed}}
    ) as w:
        for ci, name in enumerate(classes):
            for j in range(per_class):
                im = Image.new("RGB", (40, 40), (rng.randint(0, 60),) * 3)
                s = rng.randint(14, 30)
                x, y = rng.randint(0, 40 - s), rng.randint(0, 40 - s)
                ImageDraw.Draw(im).rectangle([x, y, x + s, y + s], fill=COLOURS[name])
                rel = w.add_image(im)
                opts = classes[:]
                rng.shuffle(opts)
                q = ability.question_templates[0].format(options=format_options(opts))
                w.add_sample(
                    Sample(
                        id=f"r{ci}-{j}",
                        ava="recognition",
                        image=rel,
                        width=40,
                        height=40,
                        question=q,
                        answer=name,
                        truth={"index": opts.index(name), "text": name},
                        options=opts,
                        split="test" if j % 5 == 4 else "train",
                    )
                )
                w.add_sample(
                    Sample(
                        id=f"c{ci}-{j}",
                        ava="counting",
                        image=rel,
                        width=40,
                        height=40,
                        question="How many squares are there in the image?",
                        answer="1",
                        truth={"value": 1},
                        split="test" if j % 5 == 4 else "train",
                    )
                )
    return root


def make_photo_choice_data(
    root: Path, n_images: int = 40, seed: int = 0, boxes: bool = True, only_in_test: str = "cyan"
) -> Path:
    """A ``recognition`` dataset of "photos" holding two objects each, as ``ava data build`` writes it: 64 x 32
    images, a filled square of a colour class in the left half and one of another class in the right half, one
    question per object with its box (``meta.box``, normalized; ``boxes`` False: none, the whole photo), the
    photo's classes (``meta.image_classes``) and its origin. Objects of ``only_in_test`` are all in the test
    split. Every question lists all 8 options."""
    rng = random.Random(seed)
    ability = get_ability("recognition")
    classes = list(COLOURS)
    with DatasetWriter(
        root,
        info={
            "source": "foci photo fixture",
            "synthetic": True,
            "split": {"made_by": "synthetic", "seed": seed},
            "build": {"classes": {"recognition": classes}},
        },
    ) as w:
        for i in range(n_images):
            pair = rng.sample(classes, 2)
            im = Image.new("RGB", (64, 32), (rng.randint(0, 40),) * 3)
            draw = ImageDraw.Draw(im)
            halves = [(0, 0, 32, 32), (32, 0, 64, 32)]
            for (x0, y0, x1, y1), name in zip(halves, pair, strict=True):
                draw.rectangle([x0 + 2, y0 + 2, x1 - 3, y1 - 3], fill=COLOURS[name])
            rel = w.add_image(im)
            for k, ((x0, y0, x1, y1), name) in enumerate(zip(halves, pair, strict=True)):
                opts = classes[:]
                rng.shuffle(opts)
                q = ability.question_templates[0].format(options=format_options(opts))
                meta: dict[str, Any] = {
                    "image_classes": sorted(pair),
                    "origin": {"file": f"photo_{i}.png", "image_id": i, "annotations": [k]},
                }
                if boxes:
                    meta["box"] = [x0 / 64, y0 / 32, x1 / 64, y1 / 32]
                split = "test" if name == only_in_test or i % 5 == 4 else "train"
                w.add_sample(
                    Sample(
                        id=f"p{i}-{k}",
                        ava="recognition",
                        image=rel,
                        width=64,
                        height=32,
                        question=q,
                        answer=name,
                        truth={"index": opts.index(name), "text": name},
                        options=opts,
                        split=split,
                        meta=meta,
                    )
                )
    return root


LLAVA_TEMPLATE = (
    "{% for m in messages %}{{ m['role'].upper() }}: {% for c in m['content'] %}{% if c['type'] == 'image' %}<image>\n"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %} {% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)
QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def save_tiny_vlm(path: Path, kind: str = "llava", seed: int = 0) -> Path:
    """A tiny random LlavaForConditionalGeneration or Qwen2VLForConditionalGeneration with its processor (character
    tokenizer, image processor, chat template) in ``path``."""
    import torch
    import transformers as T

    torch.manual_seed(seed)
    text = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "pad_token_id": 0,
        "bos_token_id": 2,
        "eos_token_id": 3,
    }
    if kind == "llava":
        tok, vocab = char_tokenizer(extra=["<image>"], eos=False)
        vision = {
            "model_type": "clip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
        }
        model = T.LlavaForConditionalGeneration(
            T.LlavaConfig(
                vision_config=vision,
                text_config={"model_type": "llama", "vocab_size": len(vocab), **text},
                image_token_id=vocab["<image>"],
            )
        )
        images = T.CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
        proc = T.LlavaProcessor(
            image_processor=images,
            tokenizer=tok,
            patch_size=14,
            num_additional_image_tokens=1,
            vision_feature_select_strategy="default",
            chat_template=LLAVA_TEMPLATE,
        )
    else:
        tok, vocab = char_tokenizer(
            extra=["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"], eos=False
        )
        rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}
        vision = {
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 32,
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        }
        model = T.Qwen2VLForConditionalGeneration(
            T.Qwen2VLConfig(
                text_config={"vocab_size": len(vocab), **text, "rope_parameters": rope},
                vision_config=vision,
                image_token_id=vocab["<|image_pad|>"],
                video_token_id=vocab["<|video_pad|>"],
                vision_start_token_id=vocab["<|vision_start|>"],
                vision_end_token_id=vocab["<|vision_end|>"],
            )
        )
        pixels = {"min_pixels": 28 * 28, "max_pixels": 56 * 56}
        proc = T.Qwen2VLProcessor(
            image_processor=T.Qwen2VLImageProcessor(**pixels),
            tokenizer=tok,
            video_processor=T.Qwen2VLVideoProcessor(**pixels),
            chat_template=QWEN_TEMPLATE,
        )
    model.save_pretrained(path)
    proc.save_pretrained(path)
    return path


def save_tiny_text_llm(path: Path) -> Path:
    """A tiny random LlamaForCausalLM and its tokenizer: a checkpoint whose processor takes no images."""
    import transformers as T

    tok, vocab = char_tokenizer(eos=False)
    T.LlamaForCausalLM(
        T.LlamaConfig(
            vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
        )
    ).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def run_main(args: list[str], capsys: Any) -> tuple[int, str]:
    """``ava ARGS`` in this process: (exit code, what it printed, on one line)."""
    from ava.cli.main import main

    capsys.readouterr()
    try:
        main(args)
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    captured = capsys.readouterr()
    return code, " ".join((captured.out + captured.err).split())
