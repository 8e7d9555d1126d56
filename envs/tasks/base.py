"""Common pieces of the supervised task generators: examples, batches, splits.

An :class:`Example` is one sequence, stored as numpy arrays with time on axis 0:

* ``x``: the input; int64 token ids [T] (one field) or [T, F] (F fields, each with its
  own vocabulary, e.g. retrieval's key and value), or float32 features [T, D];
* ``y``: the target; int64 class ids [T] (cross-entropy) or float32 [T, D_out] (MSE/BCE);
* ``mask``: bool [T], the positions that enter the loss and the sequence-level accuracy;
* ``metric_mask``: bool [T], the positions scored by the token-level accuracy (code
  execution: the print positions only); defaults to ``mask``.

A :class:`Batch` stacks examples to time-major tensors [T, B, ...], padding at the end
(padding has ``mask`` False; the cores are causal, so padding never leaks backwards).

Finite tasks (code execution, ListOps, ...) draw ``sizes`` examples per split from
``seed``; the splits are made disjoint by rejecting any example already drawn for an
earlier split (train, then valid, then test). Tasks with ``sizes['train'] = None`` sample
fresh training examples from an infinite stream (retrieval, MNM tasks), rejecting those
that occur in the valid or test split.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import torch
from torch import Tensor

from fastnet.options import check_choice

SPLITS = ("train", "valid", "test")
MAX_REJECTED_DRAWS = 10_000  # draws in a row that repeat an example before a split gives up


@dataclass
class Example:
    x: np.ndarray
    y: np.ndarray
    mask: np.ndarray
    metric_mask: Optional[np.ndarray] = None

    def key(self) -> bytes:
        """A hash of the input (and target), used to keep the splits disjoint."""
        h = hashlib.blake2b(digest_size=16)
        for a in (self.x, self.y):
            h.update(str(a.shape).encode())
            h.update(np.ascontiguousarray(a).tobytes())
        return h.digest()

    def __len__(self) -> int:
        return len(self.x)


@dataclass
class Batch:
    """Time-major tensors. ``reset`` False means: continue from the previous batch's state
    (language modelling in full-context mode)."""

    x: Tensor
    y: Tensor
    mask: Tensor
    metric_mask: Tensor
    reset: bool = True

    @property
    def batch_size(self) -> int:
        return self.x.shape[1]

    def to(self, device) -> "Batch":
        return dataclasses.replace(self, x=self.x.to(device), y=self.y.to(device),
                                   mask=self.mask.to(device), metric_mask=self.metric_mask.to(device))


def collate(examples: list[Example]) -> Batch:
    """Stack examples to [T, B, ...] tensors, padding at the end to the longest."""
    T, B = max(len(e) for e in examples), len(examples)
    x0, y0 = examples[0].x, examples[0].y
    x = np.zeros((T, B) + x0.shape[1:], dtype=x0.dtype)
    y = np.zeros((T, B) + y0.shape[1:], dtype=y0.dtype)
    mask = np.zeros((T, B), dtype=bool)
    metric_mask = np.zeros((T, B), dtype=bool)
    for b, e in enumerate(examples):
        n = len(e)
        x[:n, b], y[:n, b], mask[:n, b] = e.x, e.y, e.mask
        metric_mask[:n, b] = e.mask if e.metric_mask is None else e.metric_mask
    return Batch(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(mask), torch.from_numpy(metric_mask))


@dataclass
class TaskSpec:
    """What the model needs to know about a task.

    ``input_vocab``: list of vocabulary sizes, one per input field (token inputs), or None;
    ``input_dim``: feature size for float inputs, or None;
    ``output_size``: classes (ce) or target features (mse, bce);
    ``loss``: "ce", "mse" (summed over features, ½(v* - v̂)², as fwp §6.1) or "bce";
    ``metric``: the headline metric name reported by evaluation.
    """

    input_vocab: Optional[list[int]]
    input_dim: Optional[int]
    output_size: int
    loss: str
    metric: str


@dataclass
class SplitOptions:
    """The options of a task with generated splits."""

    sizes: Optional[dict[str, Optional[int]]] = None
    """Examples per split, e.g. {train: 10000, valid: 1000, test: 1000} (null: the task's own; a null size:
    sampled afresh)."""


@dataclass
class BucketOptions(SplitOptions):
    """The options of a task with generated splits of sequences of varied length."""

    bucket: int = 0
    """Group training sequences into batches of similar length, from shuffled pools of this many batches
    (0: plain shuffling)."""


class Task:
    """Base class: subclasses set ``spec`` and implement ``generate(rng) -> Example``; a task's
    options are the fields of its ``Config`` dataclass (those its name fixes, such as
    retrieval1's setting, are arguments of their own)."""

    spec: TaskSpec
    sizes: dict[str, Optional[int]] = {"train": 10_000, "valid": 1_000, "test": 1_000}

    def __init__(self, seed: int = 0, sizes: Optional[dict] = None, bucket: int = 0):
        """``bucket`` > 0: group finite training sets into batches of similar length, from
        shuffled pools of ``bucket`` batches (0: plain shuffling)."""
        self.seed, self.bucket = seed, bucket
        self.sizes = dict(self.sizes, **(sizes or {}))
        self._splits: dict[str, list[Example]] = {}
        self._eval_keys: Optional[set] = None

    # --- generation --------------------------------------------------------------
    def generate(self, rng: np.random.Generator) -> Example:
        raise NotImplementedError

    def check(self, example: Example) -> bool:
        """Ground truth: recompute the targets from the input alone."""
        raise NotImplementedError

    def eval_examples(self, rng: np.random.Generator) -> list[Example]:
        """The examples generated per draw for the valid/test splits (retrieval: one per query)."""
        return [self.generate(rng)]

    def _rng(self, split: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, SPLITS.index(split)])

    def split(self, name: str) -> list[Example]:
        """The (cached) examples of split ``name``; reproducible from the seed."""
        check_choice(name, SPLITS, kind="split")
        if name not in self._splits:
            size = self.sizes[name]
            if size is None:
                raise ValueError(f"split {name!r} of {type(self).__name__} is an infinite stream")
            taken = set()
            for earlier in SPLITS[:SPLITS.index(name)]:
                if self.sizes[earlier] is not None:
                    taken |= {e.key() for e in self.split(earlier)}
            # ``size`` counts draws: one example each, except retrieval's evaluation draws
            # (one sequence with every query)
            rng, out, keys, draws, rejected = self._rng(name), [], set(), 0, 0
            while draws < size:
                drawn = self.eval_examples(rng) if name != "train" else [self.generate(rng)]
                ks = [e.key() for e in drawn]
                if any(k in taken or k in keys for k in ks):
                    rejected += 1
                    if rejected > MAX_REJECTED_DRAWS:
                        raise ValueError(f"{type(self).__name__}: after {draws} distinct draws for split {name!r}, "
                                         f"{MAX_REJECTED_DRAWS:,} draws in a row repeated an example; the task has "
                                         f"too few distinct examples for sizes {self.sizes}: make it larger")
                    continue
                out.extend(drawn)
                keys.update(ks)
                draws, rejected = draws + 1, 0
            self._splits[name] = out
        return self._splits[name]

    # --- batching ----------------------------------------------------------------
    def train_batches(self, batch_size: int, seed: int = 0) -> Iterator[Batch]:
        """An endless stream of training batches (epochs of shuffled examples, or fresh samples)."""
        rng = np.random.default_rng([self.seed, 100 + seed])
        if self.sizes["train"] is None:
            if self._eval_keys is None:
                self._eval_keys = {e.key() for s in ("valid", "test") for e in self.split(s)}
            while True:
                batch = []
                while len(batch) < batch_size:
                    e = self.generate(rng)
                    if e.key() not in self._eval_keys:
                        batch.append(e)
                yield collate(batch)
        data = self.split("train")
        if batch_size > len(data):
            raise ValueError(f"batch_size {batch_size} is larger than the training set ({len(data)} examples)")
        while True:
            order = rng.permutation(len(data))
            batches = [order[i:i + batch_size] for i in range(0, len(order) - batch_size + 1, batch_size)]
            if self.bucket:
                # sort pools of `bucket` batches by length, so that a batch holds sequences of
                # similar length (less padding), then shuffle the batches themselves
                pool = batch_size * self.bucket
                batches = []
                for i in range(0, len(order) - batch_size + 1, pool):
                    chunk = sorted(order[i:i + pool], key=lambda j: len(data[j]))
                    batches += [chunk[k:k + batch_size] for k in range(0, len(chunk) - batch_size + 1, batch_size)]
                batches = [batches[i] for i in rng.permutation(len(batches))]
            for idx in batches:
                yield collate([data[j] for j in idx])

    def eval_batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        data = self.split(split)
        # sort by length so that padding stays small; the metrics do not depend on order
        data = sorted(data, key=len)
        for i in range(0, len(data), batch_size):
            yield collate(data[i:i + batch_size])

    def epoch_size(self) -> Optional[int]:
        return self.sizes["train"]


def one_hot(index: int, size: int) -> np.ndarray:
    v = np.zeros(size, dtype=np.float32)
    v[index] = 1.0
    return v
