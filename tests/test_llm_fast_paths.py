"""The LLM head's fast paths on the PyTorch a user has: PyTorch's varlen attention called with the arguments the
installed signature takes (stand-ins with the 2.10, 2.11 and 2.13 signatures, computed with SDPA on the CPU), and a
decoder layer that fails to compile falling back to eager with one warning, training on to the eager run's weights.
"""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch
import torch.nn.functional as F

from ava.heads.llm import packing
from ava.heads.llm.data import Collator, IndexItems, LoopData
from ava.heads.llm.packing import Varlen, probe_varlen
from ava.heads.llm.prompt import Encoded

T, D = 5, 12
CALLS: list[dict] = []


def _reference(q, k, v, cu, causal, scale):
    """Per-sample SDPA over [N, H, d] rows (K/V heads repeated to the query heads)."""
    parts = []
    bounds = cu.tolist()
    for a, b in zip(bounds, bounds[1:], strict=False):
        qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))
        if ks.shape[0] != qs.shape[0]:
            ks, vs = (t.repeat_interleave(qs.shape[0] // t.shape[0], 0) for t in (ks, vs))
        parts.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale).transpose(0, 1))
    return torch.cat(parts)


def varlen_2_10(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, return_aux=None):
    CALLS.append({"is_causal": is_causal})
    return _reference(query, key, value, cu_seq_q, is_causal, None)


def varlen_2_11(
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
):
    CALLS.append({"scale": scale, "window_size": window_size})
    return _reference(query, key, value, cu_seq_q, window_size == (-1, 0), scale)


def varlen_2_13(
    query,
    key,
    value,
    cu_seq_q,
    cu_seq_k,
    max_q,
    max_k,
    *,
    return_aux=None,
    scale=None,
    window_size=(-1, -1),
    enable_gqa=False,
    seqused_k=None,
    block_table=None,
    num_splits=None,
):
    CALLS.append({"scale": scale, "window_size": window_size, "enable_gqa": enable_gqa})
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise RuntimeError("grouped K/V heads need enable_gqa=True")
    return _reference(query, key, value, cu_seq_q, window_size == (-1, 0), scale)


def varlen_no_groups(
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
):
    """A kernel that refuses grouped K/V heads as they are (the probe then repeats them)."""
    if key.shape[1] != query.shape[1]:
        raise RuntimeError("number of heads in key/value must equal the query's")
    return _reference(query, key, value, cu_seq_q, window_size == (-1, 0), scale)


def varlen_wrong(
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
):
    """Runs, but attends across samples: the probe must not take it."""
    whole = torch.tensor([0, query.shape[0]], dtype=torch.int32)
    return _reference(query, key, value, whole, window_size == (-1, 0), scale)


def _qkv():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(7, 4, 16, generator=g)
    k, v = torch.randn(7, 2, 16, generator=g), torch.randn(7, 2, 16, generator=g)
    return q, k, v, torch.tensor([0, 3, 7], dtype=torch.int32)


@pytest.mark.parametrize(
    ("fn", "expected", "gqa"),
    [
        (varlen_2_10, {"is_causal": True}, "native"),
        (varlen_2_11, {"scale": 0.2, "window_size": (-1, 0)}, "native"),
        (varlen_2_13, {"scale": 0.2, "window_size": (-1, 0), "enable_gqa": True}, "flag"),
    ],
)
def test_varlen_is_called_with_the_arguments_its_signature_takes(fn, expected, gqa):
    """2.11's varlen_attn has no enable_gqa (a TypeError if passed), 2.10's no scale or window_size: each is called
    with what it takes, and the result is causal attention inside each sample at the asked scale."""
    q, k, v, cu = _qkv()
    way = Varlen.of(fn)
    assert way.gqa == gqa
    CALLS.clear()
    out = way(q, k, v, cu, 4, 0.2)
    assert [expected] == CALLS
    assert torch.allclose(out, _reference(q, k, v, cu, True, 0.2), atol=1e-5)


def test_probe_finds_how_to_call_the_kernel_and_refuses_a_wrong_one():
    cpu = torch.device("cpu")
    assert probe_varlen(varlen_2_11, cpu, torch.float32).gqa == "native"
    assert probe_varlen(varlen_2_13, cpu, torch.float32).gqa == "flag"
    assert probe_varlen(varlen_no_groups, cpu, torch.float32).gqa == "expand"
    with pytest.raises(ValueError, match="differs from SDPA"):
        probe_varlen(varlen_wrong, cpu, torch.float32)


def _head():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ava.heads.llm.model import build_head

    torch.manual_seed(0)
    cfg = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=300,
        attn_implementation="sdpa",
    )
    return build_head(Qwen2ForCausalLM(cfg), D, lora_r=8, seed=0)


def _encoded() -> list[Encoded]:
    return [
        Encoded([1, 2], [3, 4, 5, 6], [7, 8, 2]),
        Encoded([1, 2], [3, 9], [10, 2]),
        Encoded([1, 2], [3, 4, 5, 6, 11, 12, 13], [14, 15, 16, 2]),
    ]


def test_packed_batches_run_through_the_2_11_kernel(monkeypatch):
    """With the 2.11 signature's kernel taken (as the probe takes it on a GPU), a packed batch attends through it
    (recorded as ``varlen``) and gives the padded batch's loss."""
    cpu = torch.device("cpu")
    monkeypatch.setitem(packing._VARLEN, (str(cpu), torch.float32), Varlen.of(varlen_2_11))
    head = _head().eval()
    feats = torch.randn(3, T, D)
    items = [{"index": i} for i in range(3)]
    padded = Collator(_encoded(), T, 0)(items)
    packed = Collator(_encoded(), T, 0, pack=True)(items)
    assert head.use_packing(cpu, torch.float32)
    assert head.attention_path() == "varlen" and head.packing["gqa"] == "native"
    CALLS.clear()
    with torch.no_grad():
        b = head(packed, feats)
    head.use_packing(cpu, torch.float32, on=False)
    assert head.attention_path() == "sdpa-padded"
    with torch.no_grad():
        a = head(padded, feats)
    assert len(CALLS) == 2 and all("enable_gqa" not in c for c in CALLS)  # one call per layer
    assert abs(a.item() - b.item()) < 1e-4


def test_cpu_run_records_sample_by_sample_attention():
    head = _head()
    assert head.use_packing(torch.device("cpu"), torch.float32)
    assert head.attention_path() == "sdpa-per-sample" and "CUDA" in head.packing["why"]


def _failing_backend(gm, example_inputs):
    """Compiles small graphs (the toolchain probe) as they are; fails on a decoder layer's (as inductor can on
    dynamic shapes, the varlen op or another torch)."""
    if sum(node.op == "call_function" for node in gm.graph.nodes) > 8:
        raise RuntimeError("inductor: cannot lower this layer")
    return gm.forward


def _fit(tmp_path, name, compile_, monkeypatch=None):
    from ava.heads.llm.config import LLMHeadConfig
    from ava.heads.llm.devices import Dist

    tr = importlib.import_module("ava.heads.llm.train")
    head = _head()
    feats = torch.randn(3, T, D, generator=torch.Generator().manual_seed(3)).half()
    data = LoopData(IndexItems(3), _encoded(), T, 0, lambda b: feats.index_select(0, b["index"]))
    cfg = LLMHeadConfig(batch_size=1, epochs=2, progress=False, compile=compile_)
    summary = tr.fit(
        head,
        data,
        cfg,
        tmp_path / name,
        dist=Dist(),
        device=torch.device("cpu"),
        dtype=torch.float32,
        epochs=2,
        lr=1e-3,
        batch_size=1,
    )
    return head, summary


@pytest.mark.slow
def test_a_layer_that_fails_to_compile_falls_back_to_eager(tmp_path, monkeypatch):
    tr = importlib.import_module("ava.heads.llm.train")
    monkeypatch.setattr(tr, "COMPILE_BACKEND", _failing_backend)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        head, summary = _fit(tmp_path, "compiled", True)
    fell = [w for w in seen if "did not compile" in str(w.message)]
    assert len(fell) == 1 and "cannot lower this layer" in str(fell[0].message)
    assert summary["compiled"] == "fell-back" and summary["done"] and summary["step"] == 6
    eager, ref = _fit(tmp_path, "eager", False)
    assert ref["compiled"] is False
    a, b = head.trainable_state(), eager.trainable_state()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # the same steps, eagerly
    assert all(getattr(layer, "_compiled_call_impl", None) is None for layer in head.base.get_decoder().layers)


def test_a_genuine_error_in_a_compiled_step_is_raised(tmp_path, monkeypatch):
    """The eager retry decides: an error that is not the compiler's raises as it would eagerly."""
    tr = importlib.import_module("ava.heads.llm.train")
    head = _head()

    def step():
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        tr._compiled_step(head, step, torch.device("cpu"))
