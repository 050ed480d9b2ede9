"""How feature values are stored: one registry of codecs, each a lossy or exact map float -> stored arrays.

Every codec stores one array of values per layer (``[N, T, D]`` for the plain codecs, ``[N, T, D/2]`` for ``int4``:
:meth:`Codec.value_shape`; compressed by Zarr, see ``Codec.compressors``) and, for the scaled codecs, a sibling array
of scales (``[N, T]`` float32 for ``int8``, ``[N, T, ceil(D/64)]`` float16 for ``int4``: :meth:`Codec.scale_shape`).

- ``fp16`` (default): IEEE half precision. Exact for features already computed in fp16; from fp32 it is
  the usual round-to-nearest-even. Values beyond +-65504 would become inf, so encoding refuses them
  (use ``bf16`` for such models).
- ``bf16``: bfloat16 stored as its raw 16 bits in a ``uint16`` array (Zarr v3 has no bfloat16 type);
  decode by shifting the bits into the top half of a float32. Same range as fp32, 8 bits of mantissa.
- ``int8``: per-token symmetric quantization: ``scale = max|x| / 127`` over the D values of a token,
  ``q = round(x / scale)``. The absolute error of a value is at most ``scale / 2`` (plus the fp32
  rounding of the scale), i.e. at most 1/254 of that token's largest magnitude.
- ``int4``: symmetric 4-bit quantization in groups of :data:`INT4_GROUP` values along the feature dimension, one
  fp16 scale per group: ``scale = fp16(max|x| / 7)`` over the group, ``q = round(x / scale)`` in -7..7, stored as
  ``q + 8`` two to a byte (even feature index in the low nibble). 0.5 byte per value plus 2 bytes per group
  (0.53 byte per value at 64), about half of ``int8``. The absolute error of a value is at most ``scale / 2``, i.e.
  1/14 of its group's largest magnitude (plus the fp16 rounding of the scale, relative 2**-11). The group size was
  chosen by measurement (``benchmarks/bench_int4_groups.py``): 32 stores 0.5625
  byte per value before compression, over the 0.55 this codec is for wherever the codes do not compress; 64 has a
  7-11% lower relative error than 128 (random-vit 0.110 vs 0.118, effnet-lite0 0.111 vs 0.122) for 0.016 byte per
  value more. Feature dims must be even (the VFMs of the paper have 768 to 1536). A group's float32 pooled views are
  pooled from the features before encoding (:attr:`Codec.pools_input`), so the 4-bit error stays in the tokens.

Encoding takes a torch tensor on any device (so quantization runs on the GPU next to the forward pass) and
returns numpy arrays (``encode``), or device tensors and an out-of-range flag that extraction checks once per
shard (``encode_device``). Decoding takes numpy and returns float32 numpy (``decode``), or takes torch tensors on any
device and returns float32 on that device (``decode_device``: the heads' read path decodes where the features are
held, e.g. on the GPU); both give the same float32 bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ava.errors import AvaError
from ava.registry import Registry

if TYPE_CHECKING:
    import torch

ZSTD_LEVEL = 3
INT4_GROUP = 64  # values per fp16 scale in the int4 codec (see the module docstring)


@dataclass(frozen=True)
class Codec:
    """Base codec: subclasses define ``encode_device``, ``host`` and ``decode``.

    Extraction encodes on the device without waiting for it (:meth:`encode_device` returns tensors and a 0-dim
    "out of range" flag that stays on the device), copies the results to pinned host memory without blocking, and
    checks the flags once per shard; :meth:`encode` is the same in one blocking call.
    """

    name: str
    storage_dtype: str  # numpy dtype of the stored values
    has_scale: bool
    description: str

    def encode_device(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``x [..., T, D]`` float -> (stored values, per-token scales or None, a bool flag tensor that is true when
        some finite value does not fit the stored type, or None), all on ``x``'s device; nothing synchronizes."""
        raise NotImplementedError

    def host(self, t: torch.Tensor) -> np.ndarray:
        """A stored-values (or scales) tensor already on the CPU -> the numpy array Zarr stores."""
        return t.numpy()

    def range_error(self, peak: float) -> AvaError:
        return AvaError(f"features reach {peak:.4g}, beyond the range of the {self.name} codec")

    def encode(self, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray | None]:
        """``x [..., T, D]`` float -> (stored values, per-token scales or None), numpy; out-of-range values raise."""
        values, scale, bad = self.encode_device(x)
        if bad is not None and bool(bad):
            raise self.range_error(float(finite_peak(x)))
        return self.host(values.cpu()), None if scale is None else self.host(scale.cpu())

    def decode(self, values: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
        """Stored arrays -> float32 values ``[..., T, D]``."""
        raise NotImplementedError

    def decode_device(self, values: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        """What :meth:`encode_device` returned -> float32 values, on its device: the same values as :meth:`decode`
        of the stored arrays, bit for bit (an exact widening, or one IEEE float32 product per value). This default
        decodes on the host and copies back; codecs override it with the same arithmetic on the device. The heads'
        read path gives it the stored arrays as tensors (``ava.cache.reader.as_tensor``) on the device that holds
        the rows."""
        import torch

        host = self.decode(self.host(values.cpu()), None if scale is None else self.host(scale.cpu()))
        return torch.from_numpy(host).to(values.device)

    # -- what is stored per row: the shapes and types of the arrays a cache group makes for this codec -------------
    def value_shape(self, num_tokens: int, dim: int) -> tuple[int, ...]:
        """Shape of one row of stored values (one image, one layer)."""
        return (num_tokens, dim)

    def scale_shape(self, num_tokens: int, dim: int) -> tuple[int, ...] | None:
        """Shape of one row of scales, or None for a codec without scales."""
        return (num_tokens,) if self.has_scale else None

    @property
    def scale_dtype(self) -> str:
        """numpy dtype of the stored scales."""
        return "float32"

    def spec_fields(self) -> dict[str, Any]:
        """Facts of the codec recorded in a group's spec beside its name (not key fields: the name defines them)."""
        return {}

    @property
    def pools_input(self) -> bool:
        """Whether a group's pooled views (float32) are pooled from the features before encoding, not from the
        tokens as decoded: False for the codecs whose error is below what a head notices (a stored view then equals
        the view a head pools from the tokens it reads)."""
        return False

    def row_bytes(self, num_tokens: int, dim: int) -> tuple[int, int]:
        """Raw bytes of one row (one image, one layer): (values, scales), before compression."""
        values = int(np.prod(self.value_shape(num_tokens, dim))) * np.dtype(self.storage_dtype).itemsize
        shape = self.scale_shape(num_tokens, dim)
        return values, 0 if shape is None else int(np.prod(shape)) * np.dtype(self.scale_dtype).itemsize

    def compressors(self) -> Any:
        """Blosc: byte shuffle + lz4, chosen by measurement (``benchmarks/bench_codecs.py``): 16-bit features of trained
        or random ViTs hardly compress (zstd-3 saved 8%), so the compressor must above all be fast; byte shuffle + lz4
        runs near memory speed on those and still takes redundant features (pixels) down 3.7x. Groups keep the
        compressor they were created with. A CRC-32C of each compressed chunk follows: a flipped or lost byte fails the
        read (and ``ava cache verify`` names the row, see ava.cache.integrity) instead of decoding to wrong features."""
        import zarr.codecs

        itemsize = np.dtype(self.storage_dtype).itemsize
        return (
            zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=itemsize),
            zarr.codecs.Crc32cCodec(),
        )


def finite_peak(x: torch.Tensor) -> torch.Tensor:
    """The largest finite magnitude of ``x`` (0-dim, on its device)."""
    import torch

    return torch.where(torch.isfinite(x), x.abs(), torch.zeros((), dtype=x.dtype, device=x.device)).amax()


class Fp16Codec(Codec):
    def encode_device(self, x: torch.Tensor) -> tuple[torch.Tensor, None, torch.Tensor]:
        import torch

        half = x.to(torch.float16)
        if x.device.type == "cpu" and x.numel() and bool(torch.isfinite(half.abs().amax())):
            # the usual case, read at once where there is no device to wait for: no inf and no NaN in the halves,
            # so nothing overflowed (one vectorized reduction; the exact check below makes two bool tensors and
            # cost ~1 ms per 8 x 196 x 192 batch, ~1.5% of a small ViT's forward on one core)
            return half, None, torch.zeros((), dtype=torch.bool)
        # overflow: an inf in the halves where the value was not inf (NaN stays NaN), whatever else the row holds
        return half, None, (torch.isinf(half) & ~torch.isinf(x)).any()

    def range_error(self, peak: float) -> AvaError:
        return AvaError(f"features reach {peak:.4g}, beyond the fp16 range (65504): use --codec bf16 or int8")

    def decode(self, values: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
        return values.astype(np.float32)

    def decode_device(self, values: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        return values.float()


class Bf16Codec(Codec):
    def encode_device(self, x: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        import torch

        return x.to(torch.bfloat16).view(torch.int16), None, None

    def host(self, t: torch.Tensor) -> np.ndarray:
        return t.numpy().view(np.uint16)

    def decode(self, values: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
        return (values.astype(np.uint32) << 16).view(np.float32)

    def decode_device(self, values: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        import torch

        return values.view(torch.int16).view(torch.bfloat16).float()  # stored bits (uint16 or int16): a bfloat16


class Int8Codec(Codec):
    def compressors(self) -> Any:
        """zstd: int8 is the codec for size, and its bytes compress (1 byte per value, no exponent noise); then a
        CRC-32C per chunk, as for every codec."""
        import zarr.codecs

        return (zarr.codecs.ZstdCodec(level=ZSTD_LEVEL), zarr.codecs.Crc32cCodec())

    def encode_device(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        import torch

        x = x.float()
        scale = x.abs().amax(dim=-1) / 127.0
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = torch.round(x / safe.unsqueeze(-1)).clamp_(-127, 127).to(torch.int8)
        return q, scale, None

    def decode(self, values: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
        assert scale is not None
        return values.astype(np.float32) * scale[..., None].astype(np.float32)

    def decode_device(self, values: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        assert scale is not None
        return values.float() * scale.float().unsqueeze(-1)


@dataclass(frozen=True)
class Int4Codec(Int8Codec):
    """Symmetric 4-bit values in groups of ``group_size`` along the feature dimension, one fp16 scale per group,
    two values per byte (see the module docstring). zstd and a CRC-32C per chunk, as ``int8``."""

    group_size: int = INT4_GROUP

    def value_shape(self, num_tokens: int, dim: int) -> tuple[int, ...]:
        if dim % 2:
            from ava.cache.errors import CacheError

            raise CacheError(
                f"the {self.name} codec stores two values per byte and needs an even feature dim; this "
                f"VFM's is {dim}: use --codec int8"
            )
        return (num_tokens, dim // 2)

    def scale_shape(self, num_tokens: int, dim: int) -> tuple[int, ...]:
        return (num_tokens, -(-dim // self.group_size))

    @property
    def scale_dtype(self) -> str:
        return "float16"

    def spec_fields(self) -> dict[str, Any]:
        return {"codec_group_size": self.group_size}

    @property
    def pools_input(self) -> bool:
        """True: a 4-bit token's error (relative RMS ~0.11) would reach the float32 views the probes and kNN read;
        pooled from the features before encoding, they keep the precision the views' own storage has. Measured with
        ``benchmarks/bench_int4_ranking.py``."""
        return True

    def range_error(self, peak: float) -> AvaError:
        return AvaError(
            f"features reach {peak:.4g}: the {self.name} codec's fp16 scales (max|x| / 7) cannot hold "
            "them; use --codec int8"
        )

    def encode_device(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        import torch

        *lead, dim = x.shape
        self.value_shape(1, dim)  # an odd dim is refused
        groups = -(-dim // self.group_size)
        xg = torch.nn.functional.pad(x.float(), (0, groups * self.group_size - dim)).view(*lead, groups, -1)
        peak = xg.abs().amax(dim=-1)
        scale = (peak / 7.0).to(torch.float16)  # the scale as stored: quantize with it, so decoding matches
        s = scale.float()
        q = torch.round(xg / torch.where(s > 0, s, torch.ones_like(s)).unsqueeze(-1)).clamp_(-7, 7)
        u = (q.view(*lead, -1)[..., :dim] + 8).to(torch.uint8)
        packed = u[..., 0::2] | (u[..., 1::2] << 4)
        return packed, scale, (torch.isinf(scale) & torch.isfinite(peak)).any()

    def decode(self, values: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
        assert scale is not None
        # one gather: each stored byte's table entry is its two values as float32 (1.9x faster than unpacking the
        # nibbles with two strided writes, measured on 32 x 729 x 1152 values)
        q = np.take(_NIBBLE_PAIRS, values).view(np.float32)
        return _scaled(q, scale.astype(np.float32), self.group_size)

    def decode_device(self, values: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        import torch

        assert scale is not None
        q = torch.stack(((values & 15).to(torch.int8) - 8, (values >> 4).to(torch.int8) - 8), dim=-1)
        return _scaled(q.flatten(-2).float(), scale.float(), self.group_size)


# byte -> its two int4 values (low nibble first, stored as q + 8) as two float32, read as one float64 table entry
_NIBBLE_PAIRS = (
    np.stack([(np.arange(256) & 15) - 8, (np.arange(256) >> 4) - 8], axis=-1)
    .astype(np.float32)
    .view(np.float64)
    .ravel()
)


def _scaled(q: Any, scale: Any, group: int) -> Any:
    """``q [..., D]`` (a fresh array, overwritten) times its group's scale (``scale [..., ceil(D/group)]``), numpy or
    torch alike: the groups of a dim that ``group`` divides are a reshape; the last, shorter group otherwise takes its
    scale repeated."""
    dim, groups = q.shape[-1], scale.shape[-1]
    if dim == groups * group:
        grouped = q.reshape(*q.shape[:-1], groups, group)  # a view of q: scaled in place
        grouped *= scale[..., None]
        return q
    edges = [min(dim, (g + 1) * group) - g * group for g in range(groups)]
    if isinstance(q, np.ndarray):
        return q * np.repeat(scale, edges, axis=-1)
    import torch

    return q * torch.repeat_interleave(scale, torch.tensor(edges, device=scale.device), dim=-1)


CODECS: Registry[Codec] = Registry("codec")
CODECS.register("fp16", Fp16Codec("fp16", "float16", False, "IEEE half precision, Blosc lz4 + byte shuffle (default)"))
CODECS.register("bf16", Bf16Codec("bf16", "uint16", False, "bfloat16 as raw uint16 bits, Blosc lz4 + byte shuffle"))
CODECS.register("int8", Int8Codec("int8", "int8", True, "per-token symmetric int8 + fp32 scale per token, zstd"))
CODECS.register(
    "int4",
    Int4Codec("int4", "uint8", True, f"symmetric 4-bit, two per byte + fp16 scale per {INT4_GROUP} values, zstd"),
)


def get_codec(name: str) -> Codec:
    return CODECS.get(name)
