"""The batch stream of a run: micro-batches in order, epoch after epoch, with the position to resume from."""

from __future__ import annotations

from typing import Any

from dotformer.data.batching import Batch
from dotformer.errors import TrainingError


class BatchStream:
    """Micro-batches in order, epoch after epoch, from a BatchSampler; remembers (epoch, batch index).

    The position is the next batch to read: saving it and starting a new stream there resumes the data order
    exactly (the sampler's batches are a pure function of (seed, epoch)). Batches are collated as they are taken.
    """

    def __init__(self, sampler: Any, epoch: int = 0, index: int = 0, max_epochs: float | None = None) -> None:
        self.sampler = sampler
        self.epoch = epoch
        self.index = index
        self.max_epochs = max_epochs
        self._indices: list[list[int]] = []
        self._indices_epoch = -1

    def _epoch_indices(self) -> list[list[int]]:
        if self._indices_epoch != self.epoch:
            self._indices = self.sampler.batch_indices(self.epoch)
            self._indices_epoch = self.epoch
            if not self._indices:
                raise TrainingError("the training split gives no batches")
        return self._indices

    @property
    def batches_per_epoch(self) -> int:
        """Number of batches of the current epoch on this rank."""
        return len(self._epoch_indices())

    @property
    def epochs_done(self) -> float:
        """Passes over the data so far (fractional)."""
        return self.epoch + self.index / self.batches_per_epoch

    def exhausted(self) -> bool:
        """True when the epoch budget is used up."""
        return self.max_epochs is not None and self.epochs_done >= self.max_epochs - 1e-12

    def take(self, count: int) -> list[Batch]:
        """Up to ``count`` next batches (fewer, or none, when the epoch budget ends)."""
        out: list[Batch] = []
        while len(out) < count and not self.exhausted():
            indices = self._epoch_indices()
            rows = indices[self.index]
            out.append(self.sampler.make_batch(rows, self.epoch))
            self.index += 1
            if self.index == len(indices):
                self.epoch, self.index = self.epoch + 1, 0
        return out
