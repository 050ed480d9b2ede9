"""Published results, read beside a user's own runs: the AVA-Bench paper's Table 5 (shipped with ava) and results
folders (what `ava results export` writes, so that a lab publishes its fingerprints once and others rank their VFMs
against them without re-running).

:mod:`ava.published.model` (a source in memory: columns, entries, flags), :mod:`ava.published.paper` (the paper's
table, ``paper_table5.json``), :mod:`ava.published.folder` (results folders: the format, written and read, local or
at an fsspec URL).
"""

from ava.published.folder import read_folder, write_folder
from ava.published.model import Cell, Column, Entry, Flag, PublishedError, Source
from ava.published.paper import paper_table

__all__ = ["Cell", "Column", "Entry", "Flag", "PublishedError", "Source", "paper_table", "read_folder", "write_folder"]
