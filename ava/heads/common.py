"""Deprecated: re-exports of :mod:`ava.heads.targets`, :mod:`ava.heads.features` and :mod:`ava.heads.run_files`,
kept only while other branches move their imports; import from those modules."""

from ava.heads.features import *  # noqa: F403
from ava.heads.features import _POOL_RE  # noqa: F401
from ava.heads.run_files import *  # noqa: F403
from ava.heads.targets import *  # noqa: F403
from ava.heads.targets import truth_field as _truth  # noqa: F401
