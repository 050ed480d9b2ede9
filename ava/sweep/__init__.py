"""`ava sweep`: plan the grid of VFM x head x ability set, extract each VFM's cache once, then run every cell as its
own job (on this machine's processes and GPUs, or on a SLURM cluster through submitit), each into the run directory
`ava report` reads. Jobs form a graph (a job starts once the jobs it waits for are done). Resumable and idempotent:
a rerun runs only the jobs that are missing or failed, and adopts those a killed driver left running.

:mod:`ava.sweep.plan` (the plan: options or a TOML file, checked before any job starts), :mod:`ava.sweep.jobs`
(the jobs a plan makes, their graph and their state on disk), :mod:`ava.sweep.schedule` (which ready job starts
next, for the executor and the estimate alike), :mod:`ava.sweep.gpus` and :mod:`ava.sweep.slots` (this machine's
GPUs and the slots jobs hold), :mod:`ava.sweep.machine` (a plan's slots and device kind), :mod:`ava.sweep.child`
(a local job's own process), :mod:`ava.sweep.local` and :mod:`ava.sweep.slurm` (executors),
:mod:`ava.sweep.estimate` (a sweep's cost before it runs), :mod:`ava.sweep.run` (run a plan, report its status).
"""

from ava.sweep.plan import SweepPlan, load_plan
from ava.sweep.run import status, sweep

__all__ = ["SweepPlan", "load_plan", "status", "sweep"]
