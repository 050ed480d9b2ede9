"""Config of the kNN head."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KNNConfig:
    """A kNN run: cosine neighbours among train features, the pooled view and k picked per ability on train.

    The pick (``selection``) is leave-one-out over all of train up to ``loo_max_rows`` train rows (default 4000), and
    above that a deterministic, answer-stratified subsample of ``heldout_rows`` train rows (default 1000), each
    answered by every other train row: its cost then grows linearly with the ability's size, not quadratically."""

    ava: list[str] | None = None  # abilities; None or [] = every ability in the data
    vfm: str = ""
    data: str = ""
    cache: str = ""
    out: str = ""
    seed: int = 0
    device: str = "auto"  # "cuda" puts the faiss index on all GPUs when faiss has GPU support
    epochs: int | None = None  # unused (no training); accepted so every head takes the same options
    lr: float | None = None  # unused
    batch_size: int | None = None  # queries per faiss search call (None: 4096)
    layer: int | None = None  # the cached layer (None: the cache's default layer)
    split: str = "test"
    eval_after: bool = True
    max_train: int | None = None
    k: list[int] | int | None = field(default_factory=lambda: [1, 5, 20])  # candidates; one int = no choice
    # pooled views tried with k (picked together on held-out): "mean" over the patch tokens, and "gridN" = the mean
    # plus N x N cell means of the token grid (keeps coarse position); views the token layout cannot take are skipped
    pools: list[str] = field(default_factory=lambda: ["mean", "grid2", "grid4"])
    # how (view, k) is picked (every candidate scored with the ability's metric, see ava.heads.knn.train):
    # - "auto": "loo" while the ability has at most loo_max_rows train rows, "subsample" above (the cost of
    #   leave-one-out grows with the square of the train rows; a subsample's, linearly)
    # - "loo": leave-one-out, every train row answered by all the other train rows (N x N similarities a view)
    # - "subsample": heldout_rows train rows, drawn deterministically (seed) and stratified by answer class or
    #   bin as the train/test split is, each answered by all the other train rows (heldout_rows x N a view)
    # - "heldout": a heldout_frac slice of train answered by the other rows only (the probes' rule)
    selection: str = "auto"
    loo_max_rows: int = 4000
    heldout_rows: int = 1000
    heldout_frac: float = 0.1
    progress: bool = True
    force: bool = False  # replace a different run at `out` (atomically; see ava.heads.rundir.ownership)

    def selection_method(self, n_train: int) -> str:
        """How (view, k) is picked for an ability of ``n_train`` train rows: ``loo``, ``subsample`` or ``heldout``
        (a subsample that would hold every row is leave-one-out itself)."""
        if self.selection == "heldout" or n_train < 2:
            return "heldout"
        if self.selection == "loo" or (self.selection == "auto" and n_train <= self.loo_max_rows):
            return "loo"
        return "subsample" if self.heldout_rows < n_train else "loo"

    def selection_queries(self, n_train: int) -> int:
        """The train rows answered during the pick (each by the other train rows, or by the fit part)."""
        from ava.heads.targets import heldout_count

        method = self.selection_method(n_train)
        if method == "heldout":
            return heldout_count(n_train, self.heldout_frac)
        return self.heldout_rows if method == "subsample" else n_train
