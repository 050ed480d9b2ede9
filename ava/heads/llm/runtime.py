"""Assembling a head for training or evaluation: data, feature source, LLM, warm start, weights on disk.

Run directory files written here (besides those of :mod:`ava.heads.base`)::

    RUN/connector.safetensors    # the mlp2x_gelu connector (keys 0.weight, 0.bias, 2.weight, 2.bias)
    RUN/adapter/                 # the LoRA adapter, peft's save_pretrained (adapter_model.safetensors + config)
    RUN/train_log.jsonl          # one line per optimizer step: step, epoch, loss, lr, samples/s, tokens/s
    RUN/checkpoint/              # resume point (safetensors + JSON, no pickle; see ava.heads.llm.checkpoint):
                                 # trainable weights, optimizer, scheduler, RNG, step (about 3x the adapter:
                                 # ~0.85 GB for Qwen2-0.5B at r 128; kept so that re-running a finished command
                                 # is a no-op; delete it to save space)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ava.data.format import Dataset, Sample
from ava.errors import AvaError
from ava.heads.llm.data import IndexItems, LoopData, OnlineImages
from ava.heads.llm.model import Connector, LLMHead, build_head
from ava.heads.llm.prompt import PromptEncoder

CONNECTOR_FILE = "connector.safetensors"
ADAPTER_DIR = "adapter"
DEFAULT_LR = 1e-4
DEFAULT_BATCH = 16


@dataclass
class Source:
    """Items for a DataLoader and how a batch becomes image features on the device."""

    items: torch.utils.data.Dataset
    num_tokens: int
    dim: int
    featurize: Any
    info: dict[str, Any]
    resident: Any = None  # the ResidentFeatures of a cached source

    def ready(self) -> None:
        """Wait for cached features to be resident (raises if rows are missing or not finite)."""
        if self.resident is not None:
            self.resident.wait()


def _mirrored_cache(cfg: Any) -> Any:
    """The cache whose preprocessing, layer and dtype the online source copies, or None if there is none usable."""
    if not cfg.cache:
        return None
    from ava.cache import open_cache

    try:
        return open_cache(cfg.cache, cfg.vfm)
    except AvaError:
        return None


def feature_source(
    cfg: Any,
    dataset: Dataset,
    samples: list[Sample],
    device: torch.device,
    *,
    features: str | None = None,
    resident: bool = False,
) -> Source:
    """The cached (default) or online source of image tokens for ``samples``.

    ``resident``: cached rows are read once into memory (:class:`ava.cache.reader.ResidentFeatures`) and items are
    sample indices; otherwise items carry their features (``FeatureDataset``, read batch by batch).
    """
    mode = features or cfg.features
    if mode not in ("cache", "online"):
        raise AvaError(f"--features {mode!r}: use 'cache' or 'online'")
    if mode == "cache":
        if not cfg.cache:
            raise AvaError("--features cache needs --cache DIR (or use --features online)")
        from ava.cache import open_cache
        from ava.cache.reader import ResidentFeatures
        from ava.heads.features import require_cached

        cache = open_cache(cfg.cache, cfg.vfm)
        hint = f"run `ava cache extract --vfm {cfg.vfm} --data {cfg.data} --cache {cfg.cache} --ava {{avas}}` first"
        require_cached(cache, samples, hint)
        info = {"cache_key": cache.key, "vfm_random_weights": cache.random_weights, "features": "cache"}
        if not resident:
            from ava.cache import FeatureDataset

            return Source(
                FeatureDataset(cache, samples, layer=cfg.layer),
                cache.num_tokens,
                cache.dim,
                lambda b: b["features"],
                info,
            )
        names = [f"{s.ava}/{s.id}" for s in samples]
        resident = ResidentFeatures(cache, [s.image_sha256 for s in samples], cfg.layer, device=device, names=names)
        info["features_resident"] = f"{resident.where.type}, {str(resident.dtype).removeprefix('torch.')}"
        from ava.cache.placement import HOST, ON_DEVICE, STAGED

        info["features_placement"] = (
            ON_DEVICE if resident.where.type == "cuda" else (STAGED if torch.device(device).type == "cuda" else HOST)
        )
        items = IndexItems(len(samples))
        return Source(
            items,
            cache.num_tokens,
            cache.dim,
            lambda b: resident.gather(b.get("index_host", b["index"]), reuse=True),
            info,
            resident,
        )
    return _online_source(cfg, dataset, samples, device)


def _online_source(cfg: Any, dataset: Dataset, samples: list[Sample], device: torch.device) -> Source:
    """The VFM on every batch, with the preprocessing, layer and dtype the cache was (or would be) made with."""
    from ava.vfm import load_vfm

    cache = _mirrored_cache(cfg)
    layer = cfg.layer if cfg.layer is not None else (cache.layers[0] if cache is not None else -2)
    spec = cache.spec if cache is not None else {}
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    vfm_dtype = dtypes.get(spec.get("dtype", "fp32"), torch.float32)
    kwargs = {"preprocess": spec["preprocess"]} if isinstance(spec.get("preprocess"), str) else {}
    trust = bool(getattr(cfg, "trust_remote_code", False))  # without it a remote-code checkpoint is refused
    vfm = load_vfm(cfg.vfm, device=str(device), dtype=vfm_dtype, layers=(layer,), trust_remote_code=trust, **kwargs)
    vfm.eval()

    def featurize(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return vfm(batch["pixels"].to(device, vfm_dtype))[:, 0].float()

    featurize.vfm = vfm  # type: ignore[attr-defined]  # for FLOP counts (benchmarks)
    info = {
        "cache_key": None,
        "vfm_random_weights": bool(vfm.random_weights),
        "features": "online",
        "vfm_trust_remote_code": trust,
    }
    return Source(OnlineImages(dataset, samples, vfm.preprocess), vfm.num_tokens, vfm.dim, featurize, info)


# -- warm starts ---------------------------------------------------------------------------------------------
def _strip(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Connector weights from any of the usual key spellings (``model.mm_projector.0.weight``, ``0.weight``)."""
    out = {}
    for k, v in state.items():
        tail = ".".join(k.split(".")[-2:])
        if tail in ("0.weight", "0.bias", "2.weight", "2.bias"):
            out[tail] = v
    return out


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A ``.bin`` state dict of tensors only: ``weights_only=True`` refuses anything that would run code."""
    import pickle

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AvaError(
            f"--init {path}: not loaded: it is not a plain tensor file ({first}); ava never runs code from a "
            "weights file. Convert it to safetensors (mm_projector.safetensors) from a source you trust"
        ) from e
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise AvaError(f"--init {path}: not a dict of tensors")
    return state


def read_init(init: str | None) -> tuple[str | None, dict[str, torch.Tensor] | None]:
    """(LLM directory to use instead of --llm, connector weights) from ``--init``.

    Accepted layouts: an ``ava head align`` or ``ava head train`` run (``connector.safetensors``); a stage-2
    directory: a transformers causal-LM directory (config.json, *.safetensors, tokenizer) plus the connector as
    ``connector.safetensors`` or LLaVA's ``mm_projector.bin`` / ``mm_projector.safetensors``.
    """
    if not init:
        return None, None
    from safetensors.torch import load_file

    root = Path(init)
    if not root.is_dir():
        raise AvaError(f"--init {init}: not a directory (an align/train run or a stage-2 checkpoint directory)")
    state = None
    for name in (CONNECTOR_FILE, "mm_projector.safetensors", "mm_projector.bin"):
        if (root / name).is_file():
            path = root / name
            state = _strip(load_file(path) if name.endswith(".safetensors") else _load_tensors(path))
            break
    if state is None or len(state) != 4:
        raise AvaError(
            f"--init {init}: no connector weights found (expected {CONNECTOR_FILE} or mm_projector.bin "
            "with keys 0.weight, 0.bias, 2.weight, 2.bias)"
        )
    is_llm = (root / "config.json").is_file() and any(root.glob("*.safetensors")) and not (root / "run.json").is_file()
    return (str(root) if is_llm else None), state


def load_connector(connector: Connector, state: dict[str, torch.Tensor], where: str) -> None:
    try:
        connector.load_state_dict({k: v.float() for k, v in state.items()})
    except RuntimeError as e:
        raise AvaError(f"connector weights of {where} do not fit this VFM/LLM pair: {e}") from e


# -- assembling ----------------------------------------------------------------------------------------------
@dataclass
class Prepared:
    head: LLMHead
    loop: LoopData
    run: dict[str, Any]
    epochs: int
    lr: float
    batch_size: int


def select_train(cfg: Any, dataset: Dataset) -> tuple[list[str], list[Sample]]:
    from ava.heads.targets import select_abilities, train_samples

    abilities = select_abilities(dataset, cfg.ava)
    samples = [s for a in abilities for s in train_samples(dataset, a, cfg.max_train, cfg.seed)]
    return abilities, samples


def encode_samples(encoder: PromptEncoder, samples: list[Sample], with_answer: bool) -> list:
    return [encoder.encode(s.question, s.answer if with_answer else None) for s in samples]


def prepare_training(cfg: Any, *, device: torch.device, dtype: torch.dtype, rank: int = 0) -> Prepared:
    """Data, feature source, LLM (+ LoRA), connector (+ warm start) and the run block of a training run."""
    from ava.abilities import get_ability
    from ava.heads.llm.llms import load_llm
    from ava.heads.rundir import run_block

    dataset = Dataset(cfg.data)
    abilities, samples = select_train(cfg, dataset)
    init_llm, init_connector = read_init(cfg.init)
    llm, tokenizer, info = load_llm(
        init_llm or cfg.llm, dtype=torch.bfloat16 if dtype == torch.bfloat16 else None, device=str(device)
    )
    source = feature_source(cfg, dataset, samples, device, resident=True)
    head = build_head(
        llm, source.dim, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, seed=cfg.seed
    ).to(device)
    head.connector.float()
    if init_connector is not None:
        load_connector(head.connector, init_connector, cfg.init)
    source.ready()  # features were read while the LLM loaded; non-finite rows stop the run here
    encoder = PromptEncoder(tokenizer)
    loop = LoopData(
        source.items,
        encode_samples(encoder, samples, True),
        source.num_tokens,
        tokenizer.pad_token_id,
        source.featurize,
    )
    epochs = cfg.epochs or max(get_ability(a).epochs for a in abilities)
    random = bool(source.info["vfm_random_weights"] or info["llm_random_weights"])
    run = run_block(
        "llm",
        cfg.vfm,
        abilities,
        None,
        dataset,
        **{
            **source.info,
            **info,
            "random_weights": random,
            "init": cfg.init,
            "n_train": len(samples),
            "num_image_tokens": source.num_tokens,
            "vfm_dim": source.dim,
            "dtype": str(dtype).removeprefix("torch."),
        },
    )
    torch.manual_seed(cfg.seed + 1000 * rank)  # the dropout stream (the data order has its own seed)
    return Prepared(head, loop, run, epochs, cfg.lr or DEFAULT_LR, cfg.batch_size or DEFAULT_BATCH)


def save_weights(head: LLMHead, run_dir: Path) -> None:
    """The connector (safetensors) and the LoRA adapter (peft's format) of a trained head."""
    from safetensors.torch import save

    from ava.heads.rundir import write_file

    state = {k: v.detach().cpu().contiguous() for k, v in head.connector.state_dict().items()}
    write_file(run_dir / CONNECTOR_FILE, save(state))  # atomic; a full disk is named
    if hasattr(head.llm, "save_pretrained") and hasattr(head.llm, "peft_config"):
        head.llm.save_pretrained(str(run_dir / ADAPTER_DIR), safe_serialization=True)


def write_run_files(run_dir: Path, cfg: Any, run: dict[str, Any]) -> None:
    from ava.config import save_config
    from ava.heads.rundir import write_json

    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.json")
    write_json(run_dir / "run.json", run)


def load_trained(
    run_dir: Path, cfg: Any, device: torch.device, dim: int, dtype: torch.dtype = torch.float32
) -> tuple[LLMHead, Any]:
    """The trained head of a run directory (LLM + adapter + connector) and its tokenizer, in eval mode."""
    from peft import PeftModel
    from safetensors.torch import load_file

    from ava.heads.llm.llms import load_llm

    if not (run_dir / CONNECTOR_FILE).is_file():
        raise AvaError(f"{run_dir}: no {CONNECTOR_FILE}; training has not finished (re-run the train command)")
    init_llm, _ = read_init(cfg.init) if cfg.init else (None, None)
    # the base weights in the precision training used (bf16 on GPU by default); adapter and connector in fp32
    llm, tokenizer, _ = load_llm(init_llm or cfg.llm, dtype=dtype if dtype == torch.bfloat16 else None, device="cpu")
    if (run_dir / ADAPTER_DIR).is_dir():
        # merged into the base weights: evaluation runs plain linears (no adapter matmuls, no dropout branch)
        llm = PeftModel.from_pretrained(llm, str(run_dir / ADAPTER_DIR)).merge_and_unload()
    head = LLMHead(llm, dim)
    load_connector(head.connector, load_file(str(run_dir / CONNECTOR_FILE)), str(run_dir))
    return head.to(device).eval(), tokenizer
