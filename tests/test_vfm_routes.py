"""docs/vfm-routes.md names every registered VFM (tiny test models aside) with the route the registry gives it."""

from __future__ import annotations

import re
from pathlib import Path

from ava.vfm import VFMS

DOC = Path(__file__).resolve().parents[1] / "docs" / "vfm-routes.md"


def test_routes_doc_matches_the_registry():
    rows = dict(re.findall(r"^\| `([^`]+)` \| [^|]+ \| (\w[\w-]*) \|", DOC.read_text(), flags=re.M))
    registered = {k: VFMS.get(k).loader for k in VFMS.names() if not k.startswith("tiny-")}
    assert rows == registered
