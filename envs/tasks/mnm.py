"""The MNM paper's algorithmic tasks (metalearned-neural-memory §4.1 and appendix A).

All three sample fresh training examples (``sizes['train'] = None``); valid and test are
fixed seeded sets (1,000 each by default) kept disjoint from the training stream.

Dictionary inference (``DictionaryInference(num_pairs=k, seq_len=l)``): per example the 26 letters are split
at random into a 13-letter source and a 13-letter target vocabulary with a random
bijection F. The input is k support pairs ``src EOS tgt SEP`` (each sequence l letters
sampled with replacement), then ``EOSS``, the query ``src EOS``, then l placeholder tokens
``PH``. At each placeholder the model outputs one target letter (class = letter id 0..25).
The query's letters are drawn from the support sources, and the query differs from every
support source where that is possible (l > 1). Instances: (4,1), (8,4), (12,8), (16,12).

Double copy: 50 symbols from 10, a delimiter, then 100 blank steps during which the model
outputs the sequence twice (classes 0..9).

Priority sort (after NTM): 20 random 8-bit vectors, each with a priority uniform in
[−1, 1], then a delimiter step, then 16 blank steps during which the model outputs the 16
vectors of highest priority in decreasing priority order. Inputs are float features
[bits(8), priority, delimiter flag]; targets are bits, trained with binary cross-entropy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.tasks.base import Example, SplitOptions, Task, TaskSpec

LETTERS = 26
EOS, SEP, EOSS, PH = 26, 27, 28, 29


class DictionaryInference(Task):
    sizes = {"train": None, "valid": 1000, "test": 1000}

    @dataclass
    class Config(SplitOptions):
        """Dictionary inference (MNM §4.1): the value of a key of a dictionary seen once."""

        num_pairs: int = 4
        """Key-value pairs in the dictionary."""
        seq_len: int = 1
        """Letters per key and per value."""

    def __init__(self, seed: int = 0, **options: Any):
        """``options``: the fields of :class:`Config`."""
        cfg = self.Config(**options)
        super().__init__(seed, cfg.sizes)
        self.k, self.l = cfg.num_pairs, cfg.seq_len
        self.spec = TaskSpec(input_vocab=[LETTERS + 4], input_dim=None, output_size=LETTERS,
                             loss="ce", metric="seq_acc")

    def generate(self, rng: np.random.Generator) -> Example:
        letters = rng.permutation(LETTERS)
        source, target = letters[:13], letters[13:]
        mapping = dict(zip(source.tolist(), target.tolist()))
        support = [rng.choice(source, self.l) for _ in range(self.k)]
        seen = np.unique(np.concatenate(support))
        for _ in range(100):
            query = rng.choice(seen, self.l)
            if self.l == 1 or not any(np.array_equal(query, s) for s in support):
                break
        x: list[int] = []
        for s in support:
            x += s.tolist() + [EOS] + [mapping[c] for c in s.tolist()] + [SEP]
        x += [EOSS] + query.tolist() + [EOS] + [PH] * self.l
        y = np.zeros(len(x), dtype=np.int64)
        y[-self.l:] = [mapping[c] for c in query.tolist()]
        mask = np.zeros(len(x), dtype=bool)
        mask[-self.l:] = True
        return Example(np.array(x, dtype=np.int64), y, mask)

    def check(self, example: Example) -> bool:
        """Rebuild the partial dictionary from the support set and translate the query."""
        x = example.x.tolist()
        end = x.index(EOSS)
        mapping, i = {}, 0
        while i < end:
            j = x.index(EOS, i)
            src, tgt = x[i:j], x[j + 1:j + 1 + (j - i)]
            for a, b in zip(src, tgt):
                if mapping.setdefault(a, b) != b:
                    return False
            i = j + 1 + (j - i) + 1
        q_end = x.index(EOS, end)
        query = x[end + 1:q_end]
        expected = np.zeros_like(example.y)
        expected[-len(query):] = [mapping[c] for c in query]
        return (np.array_equal(expected, example.y) and example.mask.sum() == len(query)
                and bool(example.mask[-len(query):].all()) and x[q_end + 1:] == [PH] * len(query))


class DoubleCopy(Task):
    sizes = {"train": None, "valid": 1000, "test": 1000}

    @dataclass
    class Config(SplitOptions):
        """Double copy: the sequence, twice."""

        length: int = 50
        """Symbols in the sequence to copy twice."""
        num_symbols: int = 10
        """Size of the symbol alphabet."""

    def __init__(self, seed: int = 0, **options: Any):
        """``options``: the fields of :class:`Config`."""
        cfg = self.Config(**options)
        super().__init__(seed, cfg.sizes)
        self.length, self.num_symbols = cfg.length, cfg.num_symbols
        self.delimiter, self.blank = self.num_symbols, self.num_symbols + 1
        self.spec = TaskSpec(input_vocab=[self.num_symbols + 2], input_dim=None, output_size=self.num_symbols,
                             loss="ce", metric="seq_acc")

    def generate(self, rng: np.random.Generator) -> Example:
        n = self.length
        seq = rng.integers(0, self.num_symbols, n)
        x = np.concatenate([seq, [self.delimiter], np.full(2 * n, self.blank)]).astype(np.int64)
        y = np.concatenate([np.zeros(n + 1, dtype=np.int64), seq, seq]).astype(np.int64)
        mask = np.arange(3 * n + 1) > n
        return Example(x, y, mask)

    def check(self, example: Example) -> bool:
        n = self.length
        seq = example.x[:n]
        return (example.x[n] == self.delimiter and bool((example.x[n + 1:] == self.blank).all())
                and np.array_equal(example.y[example.mask], np.concatenate([seq, seq])))


class PrioritySort(Task):
    sizes = {"train": None, "valid": 1000, "test": 1000}

    @dataclass
    class Config(SplitOptions):
        """Priority sort: the highest-priority bit vectors, sorted."""

        num_inputs: int = 20
        """Bit vectors in the input, each with a priority."""
        num_outputs: int = 16
        """Highest-priority vectors to output, sorted."""
        bits: int = 8
        """Bits per vector."""

    def __init__(self, seed: int = 0, **options: Any):
        """``options``: the fields of :class:`Config`."""
        cfg = self.Config(**options)
        super().__init__(seed, cfg.sizes)
        self.n_in, self.n_out, self.bits = cfg.num_inputs, cfg.num_outputs, cfg.bits
        self.spec = TaskSpec(input_vocab=None, input_dim=self.bits + 2, output_size=self.bits, loss="bce",
                             metric="seq_acc")

    def generate(self, rng: np.random.Generator) -> Example:
        n, m, b = self.n_in, self.n_out, self.bits
        vectors = rng.integers(0, 2, (n, b)).astype(np.float32)
        priority = rng.uniform(-1, 1, n).astype(np.float32)
        x = np.zeros((n + 1 + m, b + 2), dtype=np.float32)
        x[:n, :b], x[:n, b], x[n, b + 1] = vectors, priority, 1.0
        y = np.zeros((n + 1 + m, b), dtype=np.float32)
        y[n + 1:] = vectors[np.argsort(-priority, kind="stable")[:m]]
        mask = np.arange(n + 1 + m) > n
        return Example(x, y, mask)

    def check(self, example: Example) -> bool:
        n, b = self.n_in, self.bits
        vectors, priority = example.x[:n, :b], example.x[:n, b]
        ranked = sorted(range(n), key=lambda i: -priority[i])[:self.n_out]
        return (np.array_equal(example.y[example.mask], vectors[ranked])
                and example.x[n, b + 1] == 1.0 and not example.x[n + 1:].any())
