"""`ava reproduce`: the paper's protocol end to end for the paper's VFMs, on the executors of `ava sweep`: feature
extraction, stage 1 (connector alignment) and stage 2 (instruction tuning) from the user's caption and instruction
data when given (else the shortcut, named in every output), stage 3 per ability with the paper's settings, then the
report beside the paper's Table 5 with ours - paper per ability and the settings that differ.

:mod:`ava.reproduce.plan` (the plan, checked before anything runs, and its chain of jobs), :mod:`ava.reproduce.run`
(running it, resumably, and reading back its report).
"""

from ava.reproduce.plan import ReproduceError, ReproducePlan
from ava.reproduce.run import plan_jobs, reproduce

__all__ = ["ReproduceError", "ReproducePlan", "plan_jobs", "reproduce"]
