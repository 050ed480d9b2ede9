"""Codecs of the feature cache: exactness of fp16/bf16, the int8 error bound, and the fp16 range check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ava.cache.codecs import CODECS, get_codec
from ava.errors import AvaError


def _features(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 7, 33, generator=g) * torch.logspace(-3, 2, 7).view(1, 7, 1)  # tokens of very different scale
    x[1, 2] = 0.0  # an all-zero token
    return x


def test_registry_lists_the_three_codecs() -> None:
    assert set(CODECS.names()) == {"fp16", "bf16", "int8"}
    with pytest.raises(AvaError, match="int8"):
        get_codec("int9")


@pytest.mark.parametrize(("name", "torch_dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_16bit_codecs_are_exact_roundings(name: str, torch_dtype: torch.dtype) -> None:
    codec, x = get_codec(name), _features()
    values, scale = codec.encode(x)
    assert scale is None and values.dtype == np.dtype(codec.storage_dtype)
    decoded = codec.decode(values, scale)
    assert decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded, x.to(torch_dtype).float().numpy())


def test_int8_error_is_within_half_a_step_per_token() -> None:
    codec, x = get_codec("int8"), _features()
    values, scale = codec.encode(x)
    assert values.dtype == np.int8 and scale is not None and scale.shape == (3, 7)
    decoded = codec.decode(values, scale)
    bound = x.abs().amax(-1).numpy() / 254.0  # scale / 2
    err = np.abs(decoded - x.numpy()).max(-1)
    assert (err <= bound * (1 + 1e-5) + 1e-12).all()
    assert (decoded[1, 2] == 0).all()
    assert np.abs(values).max() == 127  # the largest value of a token uses the full range


def test_fp16_refuses_values_beyond_its_range() -> None:
    with pytest.raises(AvaError, match="bf16"):
        get_codec("fp16").encode(torch.tensor([[1.0, 70000.0]]))
    values, _ = get_codec("bf16").encode(torch.tensor([[1.0, 70000.0]]))
    assert np.isfinite(get_codec("bf16").decode(values, None)).all()


def test_fp16_overflow_flag_is_exact_on_the_cpu_fast_path() -> None:
    """The flag is true exactly when a value that was not inf became inf in fp16 (65520 and up round to inf),
    whether or not the batch also holds NaN or inf of its own; the CPU's one-reduction shortcut agrees."""
    codec = get_codec("fp16")
    inf, nan = float("inf"), float("nan")
    cases = {
        (1.0, -2.5, 65504.0): False,
        (1.0, 65519.0): False,  # rounds down to 65504
        (1.0, 65520.0): True,
        (1.0, -7e4): True,
        (1.0, inf): False,  # an inf of the features, not an overflow of the codec
        (nan, 2.0): False,
        (nan, 7e4): True,  # a NaN elsewhere does not hide the overflow
        (inf, nan, 7e4): True,
    }
    for values, overflow in cases.items():
        x = torch.tensor([[values]])
        half, scale, flag = codec.encode_device(x)
        assert bool(flag) is overflow, values
        assert scale is None
        torch.testing.assert_close(half, x.to(torch.float16), equal_nan=True, rtol=0, atol=0)
    assert not bool(codec.encode_device(torch.zeros(0, 4, 8))[2])  # no rows: nothing overflowed (and no error)
