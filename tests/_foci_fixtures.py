"""Tiny random image-text checkpoints (CLIPModel, SiglipModel) saved with ``save_pretrained`` beside an offline
tokenizer (characters, no merges) and an image processor, loaded back through the paths a real checkpoint takes;
and a small choice dataset with many classes for the option miners. Everything here has RANDOM weights."""

from __future__ import annotations

import random
import string
from pathlib import Path

from PIL import Image, ImageDraw

from ava.abilities import format_options, get_ability
from ava.data.format import DatasetWriter, Sample

SPECIALS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]


def char_tokenizer(extra: list[str] | None = None):
    """A fast tokenizer over single characters (BPE without merges), [BOS] ... [EOS] around every text."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if not c.isspace()]
    vocab = {t: i for i, t in enumerate([*SPECIALS, *(extra or []), *chars])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[BOS] $A [EOS]", special_tokens=[("[BOS]", vocab["[BOS]"]), ("[EOS]", vocab["[EOS]"])]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]",
                                   eos_token="[EOS]", additional_special_tokens=extra or None)  # fmt: skip
    return fast, vocab


def save_tiny_image_text(path: Path, kind: str = "clip", seed: int = 0) -> Path:
    """A tiny random CLIPModel or SiglipModel with its tokenizer and image processor in ``path``."""
    import torch
    import transformers as T

    tok, vocab = char_tokenizer()
    text = {"vocab_size": len(vocab), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
            "num_attention_heads": 2, "max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": 2,
            "eos_token_id": 3}  # fmt: skip
    # the tiny-clip / tiny-siglip registry shapes (56 px, patch 14, 2 layers), so ``tiny-clip@DIR`` extracts too
    vision = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "image_size": 56, "patch_size": 14}  # fmt: skip
    torch.manual_seed(seed)
    if kind == "clip":
        model = T.CLIPModel(T.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
        proc = T.CLIPImageProcessor(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    else:
        model = T.SiglipModel(T.SiglipConfig(text_config=text, vision_config=vision))
        proc = T.SiglipImageProcessor(size={"height": 56, "width": 56})
    model.save_pretrained(path)
    tok.save_pretrained(path)
    proc.save_pretrained(path)
    return path


COLOURS = {
    "red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220), "yellow": (230, 220, 30),
    "purple": (150, 30, 180), "orange": (240, 140, 20), "cyan": (30, 210, 210), "grey": (128, 128, 128),
}  # fmt: skip


def make_choice_data(root: Path, per_class: int = 5, seed: int = 0) -> Path:
    """A split ``recognition`` dataset: 8 colour classes (a filled square of the class colour), every question
    listing all 8 options; 1 in 5 samples per class is test. Plus a ``counting`` ability (not a choice)."""
    rng = random.Random(seed)
    ability = get_ability("recognition")
    classes = list(COLOURS)
    with DatasetWriter(root, info={"source": "foci test fixture", "synthetic": True,
                                   "split": {"made_by": "synthetic", "seed": seed}}) as w:  # fmt: skip
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
                w.add_sample(Sample(id=f"r{ci}-{j}", ava="recognition", image=rel, width=40, height=40, question=q,
                                    answer=name, truth={"index": opts.index(name), "text": name}, options=opts,
                                    split="test" if j % 5 == 4 else "train"))  # fmt: skip
                w.add_sample(Sample(id=f"c{ci}-{j}", ava="counting", image=rel, width=40, height=40,
                                    question="How many squares are there in the image?", answer="1",
                                    truth={"value": 1}, split="test" if j % 5 == 4 else "train"))  # fmt: skip
    return root
