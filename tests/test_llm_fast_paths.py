"""The LLM head's fast paths on the PyTorch a user has: PyTorch's varlen attention called with the arguments the
installed signature takes (stand-ins with the 2.10, 2.11 and 2.13 signatures, computed with SDPA on the CPU), and a
decoder layer that fails to compile falling back to eager with one warning, training on to the eager run's weights.
"""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch

from ava.heads.llm import packing
from ava.heads.llm.data import Collator
from ava.heads.llm.packing import Varlen, probe_varlen
from tests.helpers import (
    VARLEN_CALLS,
    D,
    T,
    encoded_prompts,
    fit_tiny_head,
    tiny_llm_head,
    varlen_2_10,
    varlen_2_11,
    varlen_2_13,
    varlen_no_groups,
    varlen_reference,
    varlen_wrong,
)


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
    VARLEN_CALLS.clear()
    out = way(q, k, v, cu, 4, 0.2)
    assert [expected] == VARLEN_CALLS
    assert torch.allclose(out, varlen_reference(q, k, v, cu, True, 0.2), atol=1e-5)


def test_probe_finds_how_to_call_the_kernel_and_refuses_a_wrong_one():
    cpu = torch.device("cpu")
    assert probe_varlen(varlen_2_11, cpu, torch.float32).gqa == "native"
    assert probe_varlen(varlen_2_13, cpu, torch.float32).gqa == "flag"
    assert probe_varlen(varlen_no_groups, cpu, torch.float32).gqa == "expand"
    with pytest.raises(ValueError, match="differs from SDPA"):
        probe_varlen(varlen_wrong, cpu, torch.float32)


def test_packed_batches_run_through_the_2_11_kernel(monkeypatch):
    """With the 2.11 signature's kernel taken (as the probe takes it on a GPU), a packed batch attends through it
    (recorded as ``varlen``) and gives the padded batch's loss."""
    cpu = torch.device("cpu")
    monkeypatch.setitem(packing._VARLEN, (str(cpu), torch.float32), Varlen.of(varlen_2_11))
    head = tiny_llm_head().eval()
    feats = torch.randn(3, T, D)
    items = [{"index": i} for i in range(3)]
    padded = Collator(encoded_prompts(), T, 0)(items)
    packed = Collator(encoded_prompts(), T, 0, pack=True)(items)
    assert head.use_packing(cpu, torch.float32)
    assert head.attention_path() == "varlen" and head.packing["gqa"] == "native"
    VARLEN_CALLS.clear()
    with torch.no_grad():
        b = head(packed, feats)
    head.use_packing(cpu, torch.float32, on=False)
    assert head.attention_path() == "sdpa-padded"
    with torch.no_grad():
        a = head(padded, feats)
    assert len(VARLEN_CALLS) == 2 and all("enable_gqa" not in c for c in VARLEN_CALLS)  # one call per layer
    assert abs(a.item() - b.item()) < 1e-4


def test_cpu_run_records_sample_by_sample_attention():
    head = tiny_llm_head()
    assert head.use_packing(torch.device("cpu"), torch.float32)
    assert head.attention_path() == "sdpa-per-sample" and "CUDA" in head.packing["why"]


def _failing_backend(gm, example_inputs):
    """Compiles small graphs (the toolchain probe) as they are; fails on a decoder layer's (as inductor can on
    dynamic shapes, the varlen op or another torch)."""
    if sum(node.op == "call_function" for node in gm.graph.nodes) > 8:
        raise RuntimeError("inductor: cannot lower this layer")
    return gm.forward


def _fit(tmp_path, name, compile_):
    head = tiny_llm_head()
    return head, fit_tiny_head(head, tmp_path, name, epochs=2, compile=compile_)


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
    head = tiny_llm_head()

    def step():
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        tr._compiled_step(head, step, torch.device("cpu"))
