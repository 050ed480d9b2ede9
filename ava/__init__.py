"""ava: atomic visual ability fingerprints of frozen vision foundation models (AVA-Bench).

The public Python API (:mod:`ava.api`) is reachable from here: ``ava.synthesize``, ``ava.extract``,
``ava.fingerprint``, ``ava.vfm_from_module`` ... Names are resolved on first use (PEP 562), so ``import ava``
imports neither torch nor any other heavy library.
"""

from __future__ import annotations

import importlib
from typing import Any

from ava.torchvision_fix import install as _install_torchvision_fix

__version__ = "0.1.0"

_install_torchvision_fix()  # imports nothing; see ava/torchvision_fix.py

# name -> "module:attr", resolved on first access
_LAZY = {
    "AvaError": "ava.errors:AvaError",
    "DatasetResult": "ava.api:DatasetResult",
    "ExportResult": "ava.api:ExportResult",
    "ExtractResult": "ava.api:ExtractResult",
    "Fingerprint": "ava.api:Fingerprint",
    "HeadRun": "ava.api:HeadRun",
    "ReportResult": "ava.api:ReportResult",
    "ReproduceResult": "ava.api:ReproduceResult",
    "ScoreResult": "ava.api:ScoreResult",
    "SplitResult": "ava.api:SplitResult",
    "data_info": "ava.api:data_info",
    "evaluate_head": "ava.api:evaluate_head",
    "export_results": "ava.api:export_results",
    "extract": "ava.api:extract",
    "fingerprint": "ava.api:fingerprint",
    "import_data": "ava.api:import_data",
    "load_dataset": "ava.api:load_dataset",
    "load_published": "ava.api:load_published",
    "make_report": "ava.api:make_report",
    "paper_table": "ava.api:paper_table",
    "reproduce": "ava.api:reproduce",
    "rewrite_options": "ava.api:rewrite_options",
    "score": "ava.api:score",
    "split_data": "ava.api:split_data",
    "SweepResult": "ava.api:SweepResult",
    "run_sweep": "ava.api:run_sweep",
    "sweep_estimate": "ava.api:sweep_estimate",
    "sweep_status": "ava.api:sweep_status",
    "synthesize": "ava.api:synthesize",
    "train_head": "ava.api:train_head",
    "vfm_from_module": "ava.vfm.module:vfm_from_module",
    "vlm_answer": "ava.api:vlm_answer",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'ava' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    if callable(value) and not isinstance(value, type):  # a public function: its arguments' types are checked
        from ava.arguments import check_arguments

        value = check_arguments(value)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
