"""Curating atomic-ability benchmarks from a user's own annotated images (``ava data build``), beside
:mod:`ava.synth`, which renders them from nothing.

From COCO-style instances, depth maps, class folders, text boxes and raters' attributes (``sources``), the 14
AVA-Bench abilities are built by the paper's curation rules (``abilities``) and the task-augmentation tasks by
theirs (``tasks``); answers are balanced, questions split 80/20 per class x answer bin (``split``), and the result
is an ordinary ``ava`` dataset with its provenance (``build``). ``synthetic`` writes scenes with exact truth in the
same source formats, so a build can be checked against the truth it must reproduce; ``photos`` writes real-style
photos (objects cut from real photographs) with COCO instances, to see what the rules keep on real pixels.
"""

from ava.curate.build import BuildConfig, BuildError, BuildResult, build_dataset
from ava.curate.sources import SourceError

__all__ = ["BuildConfig", "BuildError", "BuildResult", "SourceError", "build_dataset"]
