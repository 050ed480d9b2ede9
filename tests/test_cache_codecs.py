"""Codecs of the feature cache: exactness of fp16/bf16, the int8 and int4 error bounds, int4's packing, the range
checks, and decoding on the host and on a device giving the same bits."""

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


def test_registry_lists_the_four_codecs() -> None:
    assert set(CODECS.names()) == {"fp16", "bf16", "int8", "int4"}
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


@pytest.mark.parametrize("name", sorted(CODECS.names()))
@pytest.mark.parametrize("dim", [64, 112, 130])
def test_device_decode_gives_the_host_decodes_bits(name: str, dim: int) -> None:
    """Every registered codec: ``decode_device`` (torch, where the heads hold the rows) equals ``decode`` (numpy) bit
    for bit, with the stored shapes the codec declares (what a cache group's arrays are made with)."""
    from ava.cache.reader import as_tensor

    codec = get_codec(name)
    x = torch.randn(2, 5, dim, generator=torch.Generator().manual_seed(dim)) * 3
    values, scale = codec.encode(x)
    assert values.shape == (2, *codec.value_shape(5, dim)) and values.dtype == np.dtype(codec.storage_dtype)
    shape = codec.scale_shape(5, dim)
    assert (scale is None) == (shape is None) == (not codec.has_scale)
    if scale is not None:
        assert scale.shape == (2, *shape) and scale.dtype == np.dtype(codec.scale_dtype)
    host = codec.decode(values, scale)
    device = codec.decode_device(as_tensor(values), None if scale is None else as_tensor(scale)).numpy()
    assert host.dtype == device.dtype == np.float32 and host.shape == (2, 5, dim)
    np.testing.assert_array_equal(host.view(np.uint32), device.view(np.uint32))
    assert sum(codec.row_bytes(5, dim)) == values[0].nbytes + (0 if scale is None else scale[0].nbytes)


def test_int4_packs_two_offset_nibbles_per_byte() -> None:
    """q + 8, the even feature in the low nibble: a golden byte pattern, and the fp16 scale max|x| / 7."""
    codec = get_codec("int4")
    x = torch.tensor([[[1.0, -1.0, 7.0, 0.0, -7.0, 3.0]]])
    values, scale = codec.encode(x)
    assert scale.dtype == np.float16 and scale.tolist() == [[[1.0]]]
    assert values.tolist() == [[[0x79, 0x8F, 0xB1]]]  # (9, 7), (15, 8), (1, 11)
    np.testing.assert_array_equal(codec.decode(values, scale), x.numpy())


@pytest.mark.parametrize("dim", [64, 112, 256])
def test_int4_error_is_within_half_a_step_per_group(dim: int) -> None:
    """|error| <= scale / 2 = max|x| / 14 over each group of 64 features (1 + 2**-10 for the fp16 rounding of the
    scale), an all-zero token decodes to zeros, and the largest value of a group uses the full range (+-7)."""
    codec = get_codec("int4")
    x = _features()
    x = torch.cat([x] * (dim // x.shape[-1] + 1), dim=-1)[..., :dim] * torch.linspace(0.5, 2, dim)
    values, scale = codec.encode(x)
    assert values.shape == (3, 7, dim // 2) and scale.shape == (3, 7, -(-dim // 64))
    decoded = codec.decode(values, scale)
    err = np.abs(decoded - x.numpy())
    for g in range(scale.shape[-1]):
        part = slice(64 * g, 64 * (g + 1))
        bound = x[..., part].abs().amax(-1).numpy() / 14.0
        assert (err[..., part].max(-1) <= bound * (1 + 2**-10) + 1e-7).all(), g
    assert (decoded[1, 2] == 0).all() and (scale[1, 2] == 0).all()
    nibbles = np.concatenate([(values & 15), (values >> 4)], axis=-1).astype(int) - 8
    assert nibbles.min() >= -7 and nibbles.max() <= 7 and np.abs(nibbles).max() == 7
    assert (np.abs(nibbles[0, 0]).max()) == 7


def test_int4_refuses_an_odd_dim_and_scales_beyond_fp16() -> None:
    codec = get_codec("int4")
    with pytest.raises(AvaError, match="even feature dim.*33.*int8"):
        codec.encode(torch.ones(1, 2, 33))
    with pytest.raises(AvaError, match="int4 codec's fp16 scales.*int8"):
        codec.encode(torch.tensor([[[1.0, 1e6]]]))  # 1e6 / 7 is beyond fp16
    values, scale = codec.encode(torch.tensor([[[1.0, float("nan"), 2.0, 3.0]]]))
    assert not np.isfinite(codec.decode(values, scale)).all()  # a NaN stays visible to the readers' check


def test_int4_stores_about_half_a_byte_per_value() -> None:
    """Raw bytes per value before compression: 0.5 + 2 / 64 at the paper's dims (the target is <= 0.55)."""
    codec = get_codec("int4")
    for t, d in ((729, 1152), (576, 1024), (576, 768), (1024, 1024), (576, 1536)):
        values, scales = codec.row_bytes(t, d)
        assert (values + scales) / (t * d) == 0.5 + 2 / 64
