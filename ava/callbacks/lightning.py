""":class:`Fingerprint`: the in-training fingerprint as a PyTorch Lightning callback (the ``lightning``
extra). It wraps :class:`~ava.callbacks.monitor.FingerprintMonitor` and logs through every logger of
the trainer (TensorBoard, W&B, CSV...)."""

from __future__ import annotations

from typing import Any

from ava.callbacks.monitor import FingerprintMonitor, check_every
from ava.errors import AvaError

try:
    from lightning.pytorch import Callback
except ImportError:
    try:
        from pytorch_lightning import Callback  # type: ignore[no-redef]
    except ImportError:
        from ava.extras import install_line

        raise AvaError(
            "ava.callbacks.Fingerprint needs PyTorch Lightning, from the lightning extra, which is not "
            f"installed: {install_line('lightning')}"
        ) from None


class Fingerprint(Callback):
    """Every ``every_n_steps`` optimizer steps (``trainer.global_step``), the fingerprint of the model being trained.

    ``vfm`` is a :func:`~ava.vfm.module.vfm_from_module` VFM wrapping (part of) the LightningModule, or a function
    ``pl_module -> VFM`` called once, at the first evaluation. Every other keyword is :class:`FingerprintMonitor`'s
    (``suite``, ``out``, ``heads``, ``baselines``, ``device``...). Metrics go to ``trainer.loggers`` on rank 0 as
    ``ava/<head>/<ability>`` and ``ava/<head>/avg_rank``; ``out/fingerprints.jsonl`` gets one line per evaluation."""

    def __init__(self, vfm: Any, *, every_n_steps: int, **monitor: Any) -> None:
        super().__init__()
        check_every(every_n_steps, "every_n_steps")
        self._vfm_arg = vfm
        self._vfm: Any = None
        self.monitor = FingerprintMonitor(self._current_vfm, every=every_n_steps, **monitor)
        self._trainer: Any = None

    def _current_vfm(self) -> Any:
        return self._vfm

    def _log(self, metrics: dict[str, float], step: int) -> None:
        for logger in self._trainer.loggers:
            logger.log_metrics(metrics, step=step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = int(trainer.global_step)
        if not self.monitor.due(step) or step == 0:
            return
        if self._vfm is None:
            arg = self._vfm_arg
            self._vfm = arg if hasattr(arg, "identity") else arg(pl_module)
        self._trainer = trainer
        self.monitor.log = self._log
        self.monitor.run(step)
