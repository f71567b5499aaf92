"""The batch stream of a run: micro-batches in order, epoch after epoch, with the position to resume from.

Every rank walks the same global order of batches (the sampler's, for one process): a step takes the next
``accumulation_steps × world_size`` batches, across an epoch's end when it comes, and rank r trains on those at
r, r + world_size, ... of them. So N processes with ``accumulation_steps`` A see, step by step, the batches one
process sees with A·N, and their update is the same (the loss is normalised by the step's global token count).
"""

from __future__ import annotations

from typing import Any

from dotformer.data.batch.batching import Batch, BatchPlan
from dotformer.errors import TrainingError


class BatchStream:
    """Micro-batches in the global order, epoch after epoch, from a one-process BatchSampler; remembers (epoch, index
    of the next global batch), the same on every rank.

    Saving the position and starting a new stream there resumes the data order exactly (the sampler's batches are a
    pure function of (seed, epoch)). An epoch's order is held as index arrays (the sampler's
    :class:`~dotformer.data.batch.batching.BatchPlan`), and batches are collated as they are taken
    (``sampler.make_batch``).

    Args:
        sampler: a :class:`dotformer.data.batch.batching.BatchSampler` of world size 1 (the global order).
        epoch, index: the position of the next batch.
        max_epochs: the epoch budget (None: none).
        rank, world_size: this process's place among the ranks that share each step.
    """

    def __init__(
        self,
        sampler: Any,
        epoch: int = 0,
        index: int = 0,
        max_epochs: float | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.sampler = sampler
        self.epoch = epoch
        self.index = index
        self.max_epochs = max_epochs
        self.rank = rank
        self.world_size = world_size
        self._plan: BatchPlan | None = None
        self._plan_epoch = -1

    def _epoch_plan(self) -> BatchPlan:
        if self._plan is None or self._plan_epoch != self.epoch:
            self._plan = self.sampler.plan(self.epoch)
            self._plan_epoch = self.epoch
            if not len(self._plan):
                raise TrainingError("the training split gives no batches")
        return self._plan

    @property
    def batches_per_epoch(self) -> int:
        """Number of batches of the current epoch, all ranks together."""
        return len(self._epoch_plan())

    def own_plan(self, epoch: int) -> BatchPlan:
        """The batches of ``epoch`` this rank trains on when every step is whole (for the line before training)."""
        return self.sampler.plan(epoch).select(slice(self.rank, None, self.world_size))

    @property
    def epochs_done(self) -> float:
        """Passes over the data so far (fractional)."""
        return self.epoch + self.index / self.batches_per_epoch

    def exhausted(self) -> bool:
        """True when the epoch budget is used up."""
        return self.max_epochs is not None and self.epochs_done >= self.max_epochs - 1e-12

    def take(self, count: int) -> list[Batch]:
        """This rank's share of the next ``count × world_size`` batches (fewer when the epoch budget ends; none when
        it has ended).

        A rank whose share of the budget's last, short step is empty gets one batch whose targets are all padding:
        it takes part in the gradient average (every rank must) and adds nothing to the loss or the gradient.
        """
        taken: list[tuple[Any, int]] = []  # (example indices, epoch) of each batch
        while len(taken) < count * self.world_size and not self.exhausted():
            plan = self._epoch_plan()
            taken.append((plan[self.index], self.epoch))
            self.index += 1
            if self.index == len(plan):
                self.epoch, self.index = self.epoch + 1, 0
        mine = [self.sampler.make_batch(rows, epoch) for rows, epoch in taken[self.rank :: self.world_size]]
        if taken and not mine:
            mine = [self.sampler.make_batch(*taken[0]).without_targets()]  # the loss and gradient zero
        return mine
