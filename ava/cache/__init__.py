"""The compressed Zarr feature cache: extract frozen-VFM patch features once, read them by image sha256.

Layout and key: :mod:`ava.cache.store`; codecs: :mod:`ava.cache.codecs`; extraction pipeline:
:mod:`ava.cache.extraction`; its size before it writes: :mod:`ava.cache.plan`; reading: :mod:`ava.cache.reader`;
``ls``/``info``/``verify``: :mod:`ava.cache.inspect`; ``rm``/``gc``: :mod:`ava.cache.remove`.
"""

from ava.cache.codecs import CODECS, Codec, get_codec
from ava.cache.extraction import ExtractConfig, extract
from ava.cache.inspect import cache_info, content_digest, list_cache, verify_cache
from ava.cache.plan import ExtractPlan, plan_extract
from ava.cache.reader import FeatureCache, FeatureDataset, open_cache
from ava.cache.remove import collect_garbage, remove_groups
from ava.cache.store import FORMAT_VERSION, CacheError, CacheGroup

__all__ = [
    "CODECS",
    "FORMAT_VERSION",
    "CacheError",
    "CacheGroup",
    "Codec",
    "ExtractConfig",
    "ExtractPlan",
    "FeatureCache",
    "FeatureDataset",
    "cache_info",
    "collect_garbage",
    "content_digest",
    "extract",
    "get_codec",
    "list_cache",
    "open_cache",
    "plan_extract",
    "remove_groups",
    "verify_cache",
]
