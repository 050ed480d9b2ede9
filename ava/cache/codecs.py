"""How feature values are stored: one registry of codecs, each a lossy or exact map float -> stored arrays.

Every codec stores one array of values shaped like the features ``[N, T, D]`` (compressed by Zarr, see
``Codec.compressors``) and, for ``int8``, a sibling array of per-token scales ``[N, T]``.

- ``fp16`` (default): IEEE half precision. Exact for features already computed in fp16; from fp32 it is
  the usual round-to-nearest-even. Values beyond +-65504 would become inf, so encoding refuses them
  (use ``bf16`` for such models).
- ``bf16``: bfloat16 stored as its raw 16 bits in a ``uint16`` array (Zarr v3 has no bfloat16 type);
  decode by shifting the bits into the top half of a float32. Same range as fp32, 8 bits of mantissa.
- ``int8``: per-token symmetric quantization: ``scale = max|x| / 127`` over the D values of a token,
  ``q = round(x / scale)``. The absolute error of a value is at most ``scale / 2`` (plus the fp32
  rounding of the scale), i.e. at most 1/254 of that token's largest magnitude.

Encoding takes a torch tensor on any device (so quantization runs on the GPU next to the forward pass) and
returns numpy arrays (``encode``), or device tensors and an out-of-range flag that extraction checks once per
shard (``encode_device``); decoding takes numpy and returns float32 numpy.
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
        """Stored arrays -> float32 values of the same shape."""
        raise NotImplementedError

    def decode_device(self, values: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        """What :meth:`encode_device` returned -> float32 values, on its device: the same values as :meth:`decode`
        of the stored arrays, bit for bit (an exact widening, or one IEEE float32 product per value). This default
        decodes on the host and copies back; codecs override it with the same arithmetic on the device."""
        import torch

        host = self.decode(self.host(values.cpu()), None if scale is None else self.host(scale.cpu()))
        return torch.from_numpy(host).to(values.device)

    def compressors(self) -> Any:
        """Blosc: byte shuffle + lz4, chosen by measurement (``benchmarks/bench_codecs.py``, table in
        ``benchmarks/README.md``): 16-bit features of trained or random ViTs hardly compress (zstd-3 saved 8%),
        so the compressor must above all be fast; byte shuffle + lz4 runs near memory speed on those and still
        takes redundant features (pixels) down 3.7x. Groups keep the compressor they were created with.
        A CRC-32C of each compressed chunk follows: a flipped or lost byte fails the read (and
        ``ava cache verify`` names the row, see ava.cache.integrity) instead of decoding to wrong features."""
        import zarr.codecs

        itemsize = np.dtype(self.storage_dtype).itemsize
        return (zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=itemsize),
                zarr.codecs.Crc32cCodec())  # fmt: skip


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

        return values.view(torch.bfloat16).float()


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


CODECS: Registry[Codec] = Registry("codec")
CODECS.register("fp16", Fp16Codec("fp16", "float16", False, "IEEE half precision, Blosc lz4 + byte shuffle (default)"))
CODECS.register("bf16", Bf16Codec("bf16", "uint16", False, "bfloat16 as raw uint16 bits, Blosc lz4 + byte shuffle"))
CODECS.register("int8", Int8Codec("int8", "int8", True, "per-token symmetric int8 + fp32 scale per token, zstd"))


def get_codec(name: str) -> Codec:
    return CODECS.get(name)
