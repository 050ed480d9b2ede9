"""The LLM head: ``mlp2x_gelu`` connector + a causal LM with LoRA (the paper's stage-3 head).

The connector maps each patch token of the frozen VFM to the LLM's embedding width; the projected
tokens take the place of ``<image>`` in the prompt (``inputs_embeds``). The loss is computed only where
there are labels: the decoder's hidden states are gathered at the supervised positions before the
output head, so the ~700-1000 image and prompt positions never reach the (vocab-wide) output layer.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ava.heads.llm.prompt import IGNORE

# peft reads `is_gradient_checkpointing`, which transformers 5 deprecates: a warning about peft, not for our users
warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*deprecated", category=FutureWarning)

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class Connector(nn.Sequential):
    """``mlp2x_gelu``: Linear(vfm_dim -> llm_dim), GELU, Linear(llm_dim -> llm_dim). Keys ``0.*``, ``2.*`` as
    in LLaVA's ``mm_projector``."""

    def __init__(self, vfm_dim: int, llm_dim: int) -> None:
        super().__init__(nn.Linear(vfm_dim, llm_dim), nn.GELU(), nn.Linear(llm_dim, llm_dim))


def add_lora(llm: nn.Module, r: int = 128, alpha: int | None = None, dropout: float = 0.05) -> nn.Module:
    """Wrap ``llm`` with LoRA on every linear layer of its blocks (not the output head); base weights frozen."""
    from peft import LoraConfig, get_peft_model

    if any("lora_" in n for n, _ in llm.named_modules()):
        raise ValueError("this model already carries LoRA layers (peft wraps in place): load a fresh copy")
    names = {n.rsplit(".", 1)[-1] for n, m in llm.named_modules() if isinstance(m, nn.Linear)}
    targets = sorted(names & set(LORA_TARGETS)) or sorted(names - {"lm_head"})
    config = LoraConfig(
        r=r,
        lora_alpha=alpha if alpha is not None else 2 * r,
        lora_dropout=dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(llm, config)
    keep_input_dtype(model)
    return model


def keep_input_dtype(model: nn.Module) -> None:
    """LoRA layers take their input in the dtype it comes in (bf16 under autocast) instead of copying it to the
    adapter's fp32 first: the same numbers under autocast (the matmul runs in bf16 either way), two fewer
    activation-sized copies per adapted linear. peft's switch (``cast_input_dtype_enabled``), set for good rather
    than inside ``peft.helpers.disable_input_dtype_casting``'s context manager."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for module in model.modules():
        if isinstance(module, BaseTunerLayer) and hasattr(module, "cast_input_dtype_enabled"):
            module.cast_input_dtype_enabled = False


def _no_mask(decoder: nn.Module) -> Any:
    """No mask (causal attention only) for ``decoder``, in the form that makes transformers read nothing on the host.

    With ``attention_mask=None`` transformers looks for packed sequences in the position ids (a ``.all()`` read
    back to the host); decoders that accept prepared masks (a dict per attention type, e.g. Qwen2) take
    ``{"full_attention": None}`` as it is, and SDPA runs with ``is_causal``. Others (or models with sliding-window
    layers, whose mask is not plain causal) get ``None``.
    """
    import inspect

    accepts = "causal_mask_mapping" in inspect.unwrap(type(decoder).forward).__code__.co_varnames
    if accepts and not getattr(decoder, "has_sliding_layers", False):
        return {"full_attention": None}
    return None


class LLMHead(nn.Module):
    """Connector + LLM. ``forward`` returns the mean cross-entropy over the supervised tokens of a batch."""

    def __init__(self, llm: nn.Module, vfm_dim: int) -> None:
        super().__init__()
        self.llm = llm
        self.llm_dim = self.base.config.hidden_size
        self.connector = Connector(vfm_dim, self.llm_dim)
        self.packing: dict[str, Any] | None = None  # set by use_packing

    @property
    def base(self) -> nn.Module:
        """The causal LM inside the peft wrapper (or the LM itself)."""
        return self.llm.get_base_model() if hasattr(self.llm, "get_base_model") else self.llm

    def embed(self, batch: dict[str, torch.Tensor], features: torch.Tensor) -> torch.Tensor:
        """Token embeddings with the projected image tokens spliced into the image slots."""
        embeds = self.base.get_input_embeddings()(batch["input_ids"])
        proj = self.connector(features.to(self.connector[0].weight.dtype)).to(embeds.dtype)
        if "image_pos" in batch:  # slots from the collator: a scatter, no data-dependent shape on the device
            index = batch["image_pos"].unsqueeze(-1).expand(-1, -1, embeds.shape[-1])
            return embeds.scatter(1, index, proj.reshape(index.shape))  # (a packed row: [1, B * T] slots)
        return embeds.masked_scatter(batch["image_mask"].unsqueeze(-1), proj)

    def hidden(self, batch: dict[str, torch.Tensor], features: torch.Tensor) -> torch.Tensor:
        embeds = self.embed(batch, features)
        # right-padded rows: causal attention alone is exact at every real token (padding only ever follows them),
        # so no mask is built and SDPA keeps its causal fast path without reading the mask on the host
        decoder = self.base.get_decoder()
        mask = batch["attention_mask"]
        if batch.get("mask_free"):
            mask = _no_mask(decoder)
        if "cu_seqlens" in batch:  # packed samples (ava.heads.llm.packing): attention stays inside each one
            if self.packing is None:
                raise RuntimeError("a packed batch needs packed attention: call LLMHead.use_packing first")
            cu, longest = batch["cu_seqlens"], batch["max_len"]
            extra = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}
            if not self.packing["varlen"]:
                extra["seq_lens"] = batch["seq_lens"]  # the exact fallback attends sample by sample
            out = decoder(
                inputs_embeds=embeds, attention_mask=mask, position_ids=batch["position_ids"], use_cache=False, **extra
            )
            return out.last_hidden_state
        out = decoder(inputs_embeds=embeds, attention_mask=mask, use_cache=False)
        return out.last_hidden_state

    def use_packing(self, device: torch.device, dtype: torch.dtype, on: bool = True) -> bool:
        """Let (``on``) or stop the model taking packed batches; returns whether packing is on.

        Off where the LLM's attention is neither SDPA nor FlashAttention (e.g. eager), with a warning."""
        from ava.heads.llm import packing

        if not on:
            packing.disable(self.base)
            self.packing = None
            return False
        self.packing = packing.enable(self.base, device, dtype)
        if self.packing is None:
            warnings.warn(
                f"packed sequences need SDPA or flash attention; this LLM uses "
                f"{getattr(self.base.config, '_attn_implementation', None)!r}: batches stay padded",
                stacklevel=2,
            )
        return self.packing is not None

    def attention_path(self) -> str:
        """How this head's batches attend: ``varlen`` or ``sdpa-per-sample`` (packed, :meth:`use_packing`), or
        ``<implementation>-padded`` (e.g. ``sdpa-padded``)."""
        if self.packing is not None:
            return str(self.packing.get("attention", "varlen" if self.packing.get("varlen") else "sdpa-per-sample"))
        return f"{getattr(self.base.config, '_attn_implementation', None) or 'eager'}-padded"

    def supervised_logits(self, batch: dict[str, torch.Tensor], features: torch.Tensor) -> tuple:
        """(logits at the positions that predict a label [N, V], targets [N], row of each [N])."""
        hidden = self.hidden(batch, features)
        if "sup_pos" in batch:  # positions from the collator (no boolean-mask gather, no host sync)
            flat = hidden.reshape(-1, hidden.shape[-1]).index_select(0, batch["sup_pos"])
            logits = self.base.get_output_embeddings()(flat).float()
            return logits, batch["sup_targets"], batch["sup_rows"]
        targets = batch["labels"][:, 1:]
        sel = targets != IGNORE
        logits = self.base.get_output_embeddings()(hidden[:, :-1][sel]).float()
        rows = torch.arange(targets.shape[0], device=targets.device).unsqueeze(1).expand_as(targets)[sel]
        return logits, targets[sel], rows

    def forward(self, batch: dict[str, torch.Tensor], features: torch.Tensor) -> torch.Tensor:
        logits, targets, _ = self.supervised_logits(batch, features)
        return F.cross_entropy(logits, targets)

    def full_logits_loss(self, batch: dict[str, torch.Tensor], features: torch.Tensor) -> torch.Tensor:
        """The same loss the plain way (logits at every position, transformers' own shifted loss): a reference."""
        embeds = self.embed(batch, features)
        out = self.llm(inputs_embeds=embeds, attention_mask=batch["attention_mask"], labels=batch["labels"])
        return out.loss

    @torch.no_grad()
    def sequence_logprob(self, batch: dict[str, torch.Tensor], features: torch.Tensor) -> torch.Tensor:
        """Sum of log-probabilities of each row's supervised tokens [B] (option scoring)."""
        logits, targets, rows = self.supervised_logits(batch, features)
        lp = torch.log_softmax(logits, -1).gather(1, targets.unsqueeze(1)).squeeze(1)
        n = batch["cu_seqlens"].shape[0] - 1 if "cu_seqlens" in batch else batch["labels"].shape[0]
        return torch.zeros(n, device=lp.device).index_add_(0, rows, lp)

    @torch.no_grad()
    def option_logprobs(
        self, prompt: dict[str, torch.Tensor], features: torch.Tensor, options: list[list[int]], chunk: int = 16
    ) -> torch.Tensor:
        """Sum of log-probabilities of each option's tokens after one prompt (batch of 1) [K].

        The prompt (image included) runs once; its KV cache is shared by the options, ``chunk`` at a time, so
        scoring 100 options costs about one prompt, not 100.
        """
        decoder, out_layer = self.base.get_decoder(), self.base.get_output_embeddings()
        out = decoder(
            inputs_embeds=self.embed(prompt, features), attention_mask=prompt["attention_mask"], use_cache=True
        )
        past, last = kv_cache_of(out), out.last_hidden_state[:, -1:]
        cache_arg = kv_cache_argument(decoder)
        scores = []
        for start in range(0, len(options), chunk):
            part = options[start : start + chunk]
            k, width = len(part), max(len(o) for o in part)
            ids = torch.zeros((k, width), dtype=torch.long, device=last.device)
            mask = torch.zeros((k, width), dtype=torch.long, device=last.device)
            for i, o in enumerate(part):
                ids[i, : len(o)], mask[i, : len(o)] = torch.tensor(o), 1
            cache = copy.deepcopy(past)
            cache.batch_repeat_interleave(k)
            attn = torch.cat([prompt["attention_mask"].expand(k, -1), mask], 1)
            h = decoder(input_ids=ids, attention_mask=attn, **{cache_arg: cache}, use_cache=True).last_hidden_state
            h = torch.cat([last.expand(k, 1, -1), h[:, :-1]], 1)  # the state that predicts each option token
            sel = mask.bool()
            lp = torch.log_softmax(out_layer(h[sel]).float(), -1).gather(1, ids[sel].unsqueeze(1)).squeeze(1)
            rows = torch.arange(k, device=lp.device).unsqueeze(1).expand(k, width)[sel]
            scores.append(torch.zeros(k, device=lp.device).index_add_(0, rows, lp))
        return torch.cat(scores)

    @torch.no_grad()
    def score_options(
        self, prompts: dict[str, torch.Tensor], features: torch.Tensor, options: list[list[list[int]]], chunk: int = 64
    ) -> list[torch.Tensor]:
        """Option scores of a batch of samples: sum of log-probabilities of each option's tokens after its sample's
        prompt; ``options[i]`` holds sample i's options as token ids; returns one [K_i] tensor per sample.

        ``prompts`` is a left-padded batch (every prompt ends at the last position). The prompts (images included)
        run once, together; their KV cache is then shared by every (sample, option) row, ``chunk`` rows at a time.
        The same numbers as :meth:`option_logprobs` one sample at a time.
        """
        decoder, out_layer = self.base.get_decoder(), self.base.get_output_embeddings()
        mask = prompts["attention_mask"]
        device = mask.device
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # each prompt from position 0 at its first real token
        out = decoder(
            inputs_embeds=self.embed(prompts, features), attention_mask=mask, position_ids=positions, use_cache=True
        )
        past, last = kv_cache_of(out), out.last_hidden_state[:, -1]
        cache_arg = kv_cache_argument(decoder)
        prompt_len = mask.sum(-1)
        pairs = [(i, o) for i, opts in enumerate(options) for o in opts]
        scores: list[torch.Tensor] = []
        for start in range(0, len(pairs), chunk):
            part = pairs[start : start + chunk]
            k, width = len(part), max(len(o) for _, o in part)
            rows = torch.tensor([i for i, _ in part], device=device)
            ids = torch.zeros((k, width), dtype=torch.long)
            opt_mask = torch.zeros((k, width), dtype=torch.long)
            for r, (_, o) in enumerate(part):
                ids[r, : len(o)], opt_mask[r, : len(o)] = torch.tensor(o), 1
            ids, opt_mask = ids.to(device), opt_mask.to(device)
            cache = copy.deepcopy(past)
            cache.batch_select_indices(rows)
            attn = torch.cat([mask.index_select(0, rows), opt_mask], 1)
            pos = prompt_len.index_select(0, rows).unsqueeze(1) + torch.arange(width, device=device)
            h = decoder(
                input_ids=ids, attention_mask=attn, position_ids=pos, **{cache_arg: cache}, use_cache=True
            ).last_hidden_state
            h = torch.cat([last.index_select(0, rows).unsqueeze(1), h[:, :-1]], 1)  # the states predicting each token
            sel = opt_mask.bool()
            lp = torch.log_softmax(out_layer(h[sel]).float(), -1).gather(1, ids[sel].unsqueeze(1)).squeeze(1)
            which = torch.arange(k, device=device).unsqueeze(1).expand(k, width)[sel]
            scores.append(torch.zeros(k, device=device).index_add_(0, which, lp))
        flat = torch.cat(scores) if scores else torch.zeros(0)
        return list(flat.split([len(o) for o in options]))

    @torch.no_grad()
    def generate(
        self,
        batch: dict[str, torch.Tensor],
        features: torch.Tensor,
        *,
        max_new_tokens: int,
        eos_token_id: int,
        pad_token_id: int,
    ) -> torch.Tensor:
        """Greedy decoding with a KV cache from left-padded prompts; returns the new tokens [B, <=max_new]."""
        embeds = self.embed(batch, features)
        return self.llm.generate(
            inputs_embeds=embeds,
            attention_mask=batch["attention_mask"],
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            num_beams=1,
            temperature=None,
            top_p=None,
            top_k=None,
        )

    # -- weights ------------------------------------------------------------------------------------
    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Only what training changes: connector and LoRA weights."""
        names = {n for n, p in self.named_parameters() if p.requires_grad}
        return {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items() if k in names}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        missing = {n for n, p in self.named_parameters() if p.requires_grad} - set(state)
        if missing:
            raise KeyError(f"missing weights: {sorted(missing)[:5]}")
        self.load_state_dict(state, strict=False)


def kv_cache_argument(decoder: Any) -> str:
    """The keyword a decoder's forward takes its KV cache (a ``transformers.Cache``) by: ``cache`` from transformers
    5.2x on (``past_key_values`` is deprecated there, and goes in 5.40), ``past_key_values`` before."""
    import inspect

    params = inspect.signature(decoder.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def kv_cache_of(output: Any) -> Any:
    """The KV cache a decoder returned with ``use_cache=True``, under its name in this transformers (reading the
    old name where the new one exists would warn)."""
    keys = output.keys()
    return output["cache"] if "cache" in keys else output["past_key_values"]


def build_head(
    llm: Any,
    vfm_dim: int,
    *,
    lora_r: int | None,
    lora_alpha: int | None = None,
    lora_dropout: float = 0.05,
    seed: int = 0,
) -> LLMHead:
    """Connector + LLM (+ LoRA when ``lora_r``), initialized reproducibly from ``seed``."""
    torch.manual_seed(seed)
    if lora_r:
        llm = add_lora(llm, lora_r, lora_alpha, lora_dropout)
    else:
        llm.requires_grad_(False)
    return LLMHead(llm, vfm_dim)
