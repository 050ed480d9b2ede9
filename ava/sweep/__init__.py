"""`ava sweep`: plan the grid of VFM x head x ability set, extract each VFM's cache once, then run every cell as its
own job (on this machine's processes, or on a SLURM cluster through submitit), each into the run directory
`ava report` reads. Resumable and idempotent: a rerun submits only the jobs that are missing or failed.

:mod:`ava.sweep.plan` (the plan: options or a TOML file, checked before any job starts), :mod:`ava.sweep.jobs`
(the jobs a plan makes and their state on disk), :mod:`ava.sweep.local` and :mod:`ava.sweep.slurm` (executors),
:mod:`ava.sweep.run` (run a plan, report its status).
"""

from ava.sweep.plan import SweepPlan, load_plan
from ava.sweep.run import status, sweep

__all__ = ["SweepPlan", "load_plan", "status", "sweep"]
