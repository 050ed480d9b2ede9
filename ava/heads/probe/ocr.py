"""OCR probe: a small character decoder over the patch tokens, trained with CTC, decoded greedily.

``S`` slot queries attend over the (standardized) patch tokens; each query scores a token by its content
(``q . x``) plus a learned per-slot position bias, initialized to a raster reading order (slot s looks near
token s * T / S) so that CTC starts from a monotonic alignment;
the pooled slot vectors go through a small projection, a width-3 convolution across slots (neighbouring
characters inform each other) and a linear layer to ``1 + n_chars`` logits, blank first. CTC
(``torch.nn.CTCLoss``) aligns the slot sequence with the text; greedy decoding takes the best class per slot,
merges repeats and drops blanks. Characters not seen in train are dropped from targets (they cannot be
predicted). It is a probe of how much text the frozen features keep, not a text recognizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ava.heads.probe.model import Standardize


def char_vocabulary(texts: Sequence[str]) -> list[str]:
    """The characters of the train texts, sorted (index 0 is reserved for the CTC blank)."""
    return sorted({c for t in texts for c in t})


def num_slots(texts: Sequence[str], num_tokens: int) -> int:
    """Enough CTC steps for the longest train text with repeats (2L + 1), within 8..64."""
    longest = max((len(t) for t in texts), default=1)
    return int(min(64, max(8, 2 * longest + 1)))


def encode_texts(texts: Sequence[str], chars: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenated CTC targets (1-based char ids) and their lengths."""
    index = {c: i + 1 for i, c in enumerate(chars)}
    ids = [[index[c] for c in t if c in index] for t in texts]
    flat = torch.tensor([i for seq in ids for i in seq], dtype=torch.long)
    return flat, torch.tensor([len(seq) for seq in ids], dtype=torch.long)


def greedy_decode(log_probs: torch.Tensor, chars: Sequence[str]) -> list[str]:
    """[S, B, C] log-probabilities -> one string per batch item (best path, repeats merged, blanks dropped)."""
    best = log_probs.argmax(-1).T.tolist()  # [B, S]
    out = []
    for path in best:
        text, prev = [], 0
        for k in path:
            if k != prev and k != 0:
                text.append(chars[k - 1])
            prev = k
        out.append("".join(text))
    return out


class CTCReader(nn.Module):
    """Patch tokens [B, T, D] -> per-slot log-probabilities [S, B, 1 + n_chars] (CTC layout).

    Tokens are first reduced to ``rank`` dimensions by a fixed PCA of the train tokens (``reduce``), so the
    slot attention is cheap enough for CPU runs; the grid trains on tokens reduced once (``read``).
    """

    def __init__(self, dim: int, num_tokens: int, slots: int, n_chars: int, hidden: int = 128, rank: int = 64) -> None:
        super().__init__()
        rank = min(rank, dim)
        self.dim, self.num_tokens, self.slots, self.n_chars, self.rank = dim, num_tokens, slots, n_chars, rank
        self.norm = Standardize(dim)
        self.register_buffer("basis", torch.eye(dim)[:, :rank].clone())
        self.query = nn.Parameter(torch.zeros(slots, rank))
        self.pos_bias = nn.Parameter(torch.zeros(slots, num_tokens))
        self.proj = nn.Linear(rank, hidden)
        self.mix = nn.Conv1d(hidden, hidden, kernel_size=3, padding=1)
        self.out = nn.Linear(hidden, 1 + n_chars)

    def init_weights(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            # reading-order prior: slot s starts looking at tokens around s * T / S in raster order, so the
            # CTC alignment starts monotonic (random biases let it settle on scrambled orders)
            centres = (torch.arange(self.slots) + 0.5) * self.num_tokens / self.slots
            width = max(1.0, self.num_tokens / self.slots)
            dist = torch.arange(self.num_tokens)[None, :] - centres[:, None]
            self.pos_bias.copy_(-0.5 * (dist / width) ** 2)
            for layer in (self.proj, self.mix, self.out):
                bound = 1 / math.sqrt(layer.weight[0].numel())
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.zero_()

    def fit_input(self, x: torch.Tensor, max_tokens: int = 4096) -> None:
        """Fit the standardization and the PCA basis on (an evenly spaced subset of) train tokens."""
        self.norm.fit(x)
        flat = self.norm(x.reshape(-1, x.shape[-1]))
        flat = flat[torch.linspace(0, len(flat) - 1, min(len(flat), max_tokens)).long()].double()
        _, vectors = torch.linalg.eigh(flat.T @ flat / len(flat))
        basis = vectors[:, -self.rank :].flip(-1)  # leading components first
        basis = basis * torch.where(basis.sum(0) < 0, -1.0, 1.0)  # a fixed sign: the same basis every run
        self.basis.copy_(basis.float())

    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) @ self.basis

    def read(self, z: torch.Tensor) -> torch.Tensor:
        scores = torch.einsum("btr,sr->bst", z, self.query) / math.sqrt(self.rank) + self.pos_bias
        slots = torch.einsum("bst,btr->bsr", scores.softmax(-1), z)  # [B, S, r]
        h = nn.functional.gelu(self.proj(slots))
        h = nn.functional.gelu(self._mix(h)) + h
        return self.out(h).log_softmax(-1).transpose(0, 1)  # [S, B, C]

    def _mix(self, h: torch.Tensor) -> torch.Tensor:
        """``self.mix`` (kernel 3, padding 1) over the slot axis of ``h`` [B, S, H], as one matrix product of each
        slot's (previous, own, next) features: the same map (the same weights and saved tensors), but oneDNN's
        backward of a small 1-d convolution took ~9 ms per step on a CPU, most of the reader's training time."""
        padded = nn.functional.pad(h, (0, 0, 1, 1))  # a zero slot before the first and after the last
        windows = torch.cat([padded[:, :-2], padded[:, 1:-1], padded[:, 2:]], -1)  # [B, S, 3H], kernel taps 0, 1, 2
        weight = self.mix.weight.permute(0, 2, 1).flatten(1)  # [H_out, 3 * H_in], tap-major like the windows
        return nn.functional.linear(windows, weight, self.mix.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.read(self.reduce(x))


def ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean CTC loss of a batch (infinite losses from impossible alignments are zeroed)."""
    steps = torch.full((log_probs.shape[1],), log_probs.shape[0], dtype=torch.long)
    loss = nn.CTCLoss(blank=0, zero_infinity=True, reduction="mean")
    return loss(log_probs, targets, steps, lengths)
