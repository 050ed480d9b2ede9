"""What a job costs before it runs: device seconds and bytes written, from the shapes and the device's speeds.

:mod:`ava.cost.speeds` (the speed table per device kind, shipped as ``speeds.json`` with each figure's date and
source, and this machine's calibration under ``$AVA_HOME``), :mod:`ava.cost.shapes` (a VFM's and a dataset's
shapes), :mod:`ava.cost.model` (an extraction's and a head job's estimate), :mod:`ava.cost.calibrate` (timing
this machine in seconds). ``ava sweep --dry-run`` adds them up over the jobs' graph (:mod:`ava.sweep.estimate`).
"""

from ava.cost.model import Estimate, extract_estimate, head_estimate
from ava.cost.shapes import DataShape, VFMShape, data_shape, vfm_shape
from ava.cost.speeds import CostError, Speeds, kinds, speeds_for

__all__ = [
    "CostError",
    "DataShape",
    "Estimate",
    "Speeds",
    "VFMShape",
    "data_shape",
    "extract_estimate",
    "head_estimate",
    "kinds",
    "speeds_for",
    "vfm_shape",
]
