"""Print the size table of ``docs/cache-size.md`` (``ava.cache.plan.size_table``: the official set's cache per VFM
and codec); ``tests/test_cache_plan.py`` checks that the page holds it.

    python docs/make_size_table.py
"""

from __future__ import annotations

from ava.cache.plan import size_table

if __name__ == "__main__":
    print(size_table(), end="")
