"""Sequential ListOps (recurrent-FWP appendix B.3).

Prefix lists of MAX, MIN and FIRST, e.g. ``[MAX 6 1 [FIRST 2 3 ] 0 [MIN 4 7 1 ] ] -> 6``.
A list has 2..4 arguments (fewer than 5, as in the paper; at least 2 so that each
operation does something), each a digit or a sub-list; the nesting depth is exactly
``depth`` (10 or 15). The target (a digit, class 0..9) is read at the last token only.

Generation: one argument of a depth-d list (at a random position) is a list of depth
exactly d−1; every other argument is a sub-list with probability ``sublist_prob`` (of a
uniformly random depth 1..d−1) and a digit otherwise. With the default 0.17 the depth-10
lengths average ≈ 96 tokens (min ≈ 34; paper: 37–364, mean 98) and depth 15 ≈ 210 (paper
61–676, mean ≈ 190).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.tasks.base import BucketOptions, Example, Task, TaskSpec

OPERATORS = ["[MAX", "[MIN", "[FIRST"]
VOCAB = OPERATORS + ["]"] + [str(d) for d in range(10)]
INDEX = {w: i for i, w in enumerate(VOCAB)}
MIN_ARGS, MAX_ARGS = 2, 4


def evaluate(tokens: list[str]) -> int:
    """Evaluate a prefix list with a stack (the ground-truth checker)."""
    stack: list[tuple[str, list[int]]] = []
    result = None
    for tok in tokens:
        if tok in OPERATORS:
            stack.append((tok, []))
        elif tok == "]":
            op, args = stack.pop()
            if not args:
                raise ValueError("empty list")
            value = {"[MAX": max, "[MIN": min, "[FIRST": lambda a: a[0]}[op](args)
            if stack:
                stack[-1][1].append(value)
            else:
                result = value
        else:
            stack[-1][1].append(int(tok))
    if stack or result is None:
        raise ValueError("unbalanced list")
    return result


def depth_of(tokens: list[str]) -> int:
    d = best = 0
    for tok in tokens:
        d += tok in OPERATORS
        d -= tok == "]"
        best = max(best, d)
    return best


class ListOps(Task):
    @dataclass
    class Config(BucketOptions):
        """ListOps: the value of a nested list expression."""

        sublist_prob: float = 0.17
        """Probability that an argument is a nested list rather than a digit."""

    def __init__(self, depth: int = 10, seed: int = 0, **options: Any):
        """``depth``: maximum nesting depth of a list; ``options``: the fields of :class:`Config`."""
        cfg = self.Config(**options)
        sublist_prob, sizes, bucket = cfg.sublist_prob, cfg.sizes, cfg.bucket
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        super().__init__(seed, sizes, bucket)
        self.depth, self.sublist_prob = depth, sublist_prob
        self.spec = TaskSpec(input_vocab=[len(VOCAB)], input_dim=None, output_size=10, loss="ce", metric="seq_acc")

    def _list(self, rng: np.random.Generator, depth: int) -> tuple[list[str], int]:
        """The tokens of a random list of exactly ``depth`` and its value, computed on the tree as
        it is built (independently of the stack evaluator that checks it)."""
        n = int(rng.integers(MIN_ARGS, MAX_ARGS + 1))
        deep = int(rng.integers(n))
        op = OPERATORS[rng.integers(3)]
        tokens, values = [op], []
        for i in range(n):
            if depth > 1 and (i == deep or rng.random() < self.sublist_prob):
                sub_tokens, value = self._list(rng, depth - 1 if i == deep else int(rng.integers(1, depth)))
                tokens += sub_tokens
            else:
                value = int(rng.integers(10))
                tokens.append(str(value))
            values.append(value)
        value = {"[MAX": max(values), "[MIN": min(values), "[FIRST": values[0]}[op]
        return tokens + ["]"], value

    def generate(self, rng: np.random.Generator) -> Example:
        tokens, value = self._list(rng, self.depth)
        x = np.array([INDEX[t] for t in tokens], dtype=np.int64)
        y = np.zeros(len(x), dtype=np.int64)
        y[-1] = value
        mask = np.zeros(len(x), dtype=bool)
        mask[-1] = True
        return Example(x, y, mask)

    def check(self, example: Example) -> bool:
        tokens = [VOCAB[i] for i in example.x]
        return (depth_of(tokens) == self.depth and bool(example.mask[-1]) and example.mask.sum() == 1
                and int(example.y[-1]) == evaluate(tokens))
