"""Write the API reference of ``ava`` (``ava.api`` and the names of ``import ava``) from the docstrings, with pdoc.

    python docs/make_api.py [OUT]        # default OUT: docs/api; open OUT/ava/api.html

pdoc comes with the ``dev`` extra (``pip install -c .ci/constraints.txt -e ".[dev]"``).
"""

from __future__ import annotations

import sys
from pathlib import Path

MODULES = ("ava.api",)


def make_api_docs(out: Path) -> list[Path]:
    """Render the reference into ``out``; returns the HTML pages written."""
    import pdoc

    pdoc.render.configure(docformat="restructuredtext", footer_text="ava: AVA-Bench")
    pdoc.pdoc(*MODULES, output_directory=out)
    return sorted(out.rglob("*.html"))


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "api"
    for page in make_api_docs(out):
        print(page)
