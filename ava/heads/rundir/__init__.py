"""A run directory: what one head's training writes, what ``ava head eval`` scores again and ``ava report`` reads.

The files, and who writes them::

    RUN/
      config.json                 # the resolved training config (head, vfm, abilities, data, cache, seed, ...);
                                  #   paths stored absolute, so the run means the same files from anywhere
      run.json                    # {"head", "vfm", "abilities", "random_weights", "split", "cache_key",
                                  #   "data_identity", "features", ...}: what the run was trained on
      results_<split>.json        # the ``ava score`` results schema, plus the "run" block above
      predictions_<split>.jsonl   # one line per sample: id, ava, prediction (raw reply), parsed, truth, score
      .lock                       # held (flock) by the one training process that owns RUN
      ...                         # the head's own files: weights (safetensors), knn.json, checkpoints, logs

The rules, one module each:

- :mod:`ava.heads.rundir.ownership`: one job at a time per directory, no mixing of runs with other training
  settings (refused by field name), ``--force`` replaces a run whole (staged beside it, then swapped in);
- :mod:`ava.heads.rundir.files`: every file is written atomically (a full disk leaves the old file or none), a
  run is started, scored and opened again through these functions;
- :mod:`ava.heads.rundir.identity`: the data and cache a run was trained on are identified, and evaluation is
  held to them; nothing recorded in a run directory runs code.
"""

from __future__ import annotations

from ava.heads.rundir.files import (
    DiskFullError,
    SavedRun,
    evaluate_run,
    open_saved_run,
    read_json,
    read_run,
    run_block,
    score_and_write,
    start_run,
    write_file,
    write_json,
)
from ava.heads.rundir.identity import (
    PATH_FIELDS,
    RunIdentityError,
    check_cache_key,
    check_eval_target,
    check_recorded_options,
    data_identity,
    resolved,
    resolved_paths,
    shown,
)
from ava.heads.rundir.ownership import RunDirError, claim_run, differing_fields, owns_run_dir, swap_in, training_fields

__all__ = [
    "PATH_FIELDS",
    "DiskFullError",
    "RunDirError",
    "RunIdentityError",
    "SavedRun",
    "check_cache_key",
    "check_eval_target",
    "check_recorded_options",
    "claim_run",
    "data_identity",
    "differing_fields",
    "evaluate_run",
    "open_saved_run",
    "owns_run_dir",
    "read_json",
    "read_run",
    "resolved",
    "resolved_paths",
    "run_block",
    "score_and_write",
    "shown",
    "start_run",
    "swap_in",
    "training_fields",
    "write_file",
    "write_json",
]
