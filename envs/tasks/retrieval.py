"""Associative retrieval (fwp-linear-transformers §6.1, appendix D).

Keys K and values V are sets of S symbols. A sequence is L pairs (k, v) followed by a
query q, one of the keys in the sequence; the target is the one-hot vector (in R^S) of the
value most recently paired with q, compared with the read by ½‖v* − v̂‖² (MSE loss).

* setting 1 (capacity): L = S, keys and values sampled without replacement;
* setting 2 (update rules): L = 2S, sampled with replacement, so keys can be rebound.

Encoding: ``x`` is [L+1, 2] int: column 0 the key id (0..S-1), column 1 the value id
(0..S-1; id S means "no value", used at the query step). ``y`` is [L+1, S] float, zero
except at the query step; ``mask`` marks the query step only.

Training samples fresh sequences; valid and test are each ``eval_sequences`` (default 20)
sequences × every distinct key of the sequence as a query (the paper's evaluation: 20
sequences × all S queries).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from envs.tasks.base import Example, Task, TaskSpec, one_hot


class AssociativeRetrieval(Task):
    @dataclass
    class Config:
        """Associative retrieval (§6.1): recall the value of a queried key."""

        num_keys: int = 20
        """S, the number of keys (and of values)."""
        seq_len: Optional[int] = None
        """L, the (key, value) pairs before the query (null: S in setting 1, 2S in setting 2)."""
        eval_sequences: int = 20
        """Sequences in each of the valid and test splits."""

    def __init__(self, setting: int = 2, seed: int = 0, **options: Any):
        """``setting``: 1 (keys without replacement, L <= S) or 2 (with replacement), as in §6.1;
        ``options``: the fields of :class:`Config`."""
        cfg = self.Config(**options)
        num_keys, seq_len, eval_sequences = cfg.num_keys, cfg.seq_len, cfg.eval_sequences
        if setting not in (1, 2):
            raise ValueError(f"setting must be 1 or 2, got {setting}")
        if num_keys < 1 or eval_sequences < 1 or (seq_len is not None and seq_len < 1):
            raise ValueError(f"num_keys, seq_len and eval_sequences must be >= 1, got {num_keys}, {seq_len} and "
                             f"{eval_sequences}")
        S = num_keys
        L = seq_len if seq_len is not None else (S if setting == 1 else 2 * S)
        if setting == 1 and L > S:
            raise ValueError(f"setting 1 samples without replacement: seq_len {L} > num_keys {S}")
        self.setting, self.S, self.L = setting, S, L
        super().__init__(seed, {"train": None, "valid": eval_sequences, "test": eval_sequences})
        self.spec = TaskSpec(input_vocab=[S, S + 1], input_dim=None, output_size=S, loss="mse", metric="mse")

    def _sequence(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        S, L = self.S, self.L
        if self.setting == 1:
            return rng.permutation(S)[:L], rng.permutation(S)[:L]
        return rng.integers(0, S, L), rng.integers(0, S, L)

    def _example(self, keys: np.ndarray, values: np.ndarray, query: int) -> Example:
        S, L = self.S, self.L
        x = np.zeros((L + 1, 2), dtype=np.int64)
        x[:L, 0], x[:L, 1], x[L] = keys, values, (query, S)
        y = np.zeros((L + 1, S), dtype=np.float32)
        y[L] = one_hot(int(values[np.flatnonzero(keys == query)[-1]]), S)
        mask = np.zeros(L + 1, dtype=bool)
        mask[L] = True
        return Example(x, y, mask)

    def generate(self, rng: np.random.Generator) -> Example:
        keys, values = self._sequence(rng)
        return self._example(keys, values, int(rng.choice(keys)))

    def eval_examples(self, rng: np.random.Generator) -> list[Example]:
        keys, values = self._sequence(rng)
        return [self._example(keys, values, int(q)) for q in np.unique(keys)]

    def check(self, example: Example) -> bool:
        """Replay the writes into a dictionary; the last binding of the query wins."""
        memory = {}
        query = None
        for t, (k, v) in enumerate(example.x):
            if v == self.S:
                query = int(k)
                assert t == len(example.x) - 1
            else:
                memory[int(k)] = int(v)
        expected = np.zeros_like(example.y)
        expected[-1, memory[query]] = 1.0
        return (query is not None and np.array_equal(expected, example.y)
                and example.mask.sum() == 1 and bool(example.mask[-1]))
