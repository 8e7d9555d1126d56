"""Code execution (recurrent-FWP appendix B.1, after Fan et al.).

A program is ``num_statements`` (100) word-level statements over 3 or 5 variables:

* assign: ``x = 7 ;`` (a digit 0..9);
* increment / decrement: ``x ++ ;`` / ``x -- ;`` (of an assigned variable);
* print: ``print x ;`` (of an assigned variable);
* conditional: ``if x < 3 : y ++ ;`` with a comparison <, > or == of an assigned variable
  and a digit, and an assign / increment / decrement body.

The last statement is always a print. The target is the no-output class 0 everywhere
except at the ``;`` ending each print, where it is the printed value v ∈ [−8, 16] as
class v + 9. A statement that would move a value out of [−8, 16] is rejected and redrawn.
``mask`` covers every position (sequence accuracy: all outputs right); ``metric_mask``
covers the print positions (token-level print accuracy, appendix Table 5).

The statement mix (assign .25, inc/dec .30, print .20, if .25) gives ~4.5 tokens per
statement, ~450 tokens per program, as in the paper.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.tasks.base import BucketOptions, Example, Task, TaskSpec

LOW, HIGH = -8, 16
NO_OUTPUT = 0
VARIABLE_NAMES = "xyzwv"
KEYWORDS = ["=", ";", "++", "--", "print", "if", ":", "<", ">", "=="]
STATEMENT_PROBS = {"assign": 0.25, "step": 0.30, "print": 0.20, "if": 0.25}


def value_class(v: int) -> int:
    return v - LOW + 1


class CodeExecution(Task):
    @dataclass
    class Config(BucketOptions):
        """Code execution: the value of each printed variable."""

        num_statements: int = 100
        """Statements per program, the final print included."""

    def __init__(self, num_variables: int = 3, seed: int = 0, **options: Any):
        """``num_variables``: variables a program uses (3 or 5 in the paper); ``options``: the
        fields of :class:`Config`."""
        cfg = self.Config(**options)
        num_statements, sizes, bucket = cfg.num_statements, cfg.sizes, cfg.bucket
        if not 1 <= num_variables <= len(VARIABLE_NAMES):
            raise ValueError(f"num_variables must be in 1..{len(VARIABLE_NAMES)}")
        if num_statements < 2:
            raise ValueError(f"num_statements must be >= 2 (an assignment, then the final print), got {num_statements}")
        super().__init__(seed, sizes, bucket)
        self.num_variables, self.num_statements = num_variables, num_statements
        self.vocab = list(VARIABLE_NAMES[:num_variables]) + KEYWORDS + [str(d) for d in range(10)]
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.spec = TaskSpec(input_vocab=[len(self.vocab)], input_dim=None,
                             output_size=HIGH - LOW + 2, loss="ce", metric="seq_acc")

    # --- generation --------------------------------------------------------------
    def _statement(self, rng, env: dict, kind: str):
        """Tokens of one statement of ``kind`` and its effect, or None if it is invalid."""
        names = VARIABLE_NAMES[:self.num_variables]
        assigned = sorted(env)
        if kind == "assign":
            var, val = names[rng.integers(len(names))], int(rng.integers(10))
            return [var, "=", str(val), ";"], (var, val), None
        if not assigned:
            return None
        var = assigned[rng.integers(len(assigned))]
        if kind == "step":
            op = "++" if rng.random() < 0.5 else "--"
            return [var, op, ";"], (var, env[var] + (1 if op == "++" else -1)), None
        if kind == "print":
            return ["print", var, ";"], None, env[var]
        # conditional
        cmp, const = ["<", ">", "=="][rng.integers(3)], int(rng.integers(10))
        body_kind = ["assign", "step"][rng.integers(2)]
        body_tokens, effect, _ = self._statement(rng, env, body_kind)
        holds = {"<": env[var] < const, ">": env[var] > const, "==": env[var] == const}[cmp]
        return ["if", var, cmp, str(const), ":"] + body_tokens, effect if holds else None, None

    def generate(self, rng: np.random.Generator) -> Example:
        env: dict[str, int] = {}
        tokens, targets = [], []
        kinds, probs = list(STATEMENT_PROBS), list(STATEMENT_PROBS.values())
        for i in range(self.num_statements):
            while True:
                kind = "print" if i == self.num_statements - 1 else kinds[rng.choice(len(kinds), p=probs)]
                if kind == "print" and not env:
                    kind = "assign"  # only reachable for a one-statement program
                drawn = self._statement(rng, env, kind)
                if drawn is None:
                    continue
                toks, effect, printed = drawn
                if effect is not None and not LOW <= effect[1] <= HIGH:
                    continue
                break
            if effect is not None:
                env[effect[0]] = effect[1]
            tokens += toks
            targets += [NO_OUTPUT] * (len(toks) - 1) + [value_class(printed) if printed is not None else NO_OUTPUT]
        x = np.array([self.index[t] for t in tokens], dtype=np.int64)
        y = np.array(targets, dtype=np.int64)
        return Example(x, y, np.ones(len(x), dtype=bool), y != NO_OUTPUT)

    # --- ground truth ------------------------------------------------------------
    def interpret(self, tokens: list[str]) -> list[int]:
        """Execute word-level code; returns the target class of every token position."""
        env: dict[str, int] = {}
        out, i = [], 0

        def simple(j):
            """Run the simple statement starting at j; returns (next index, printed, effect)."""
            if tokens[j] == "print":
                return j + 3, env[tokens[j + 1]], None
            var = tokens[j]
            if tokens[j + 1] == "=":
                return j + 4, None, (var, int(tokens[j + 2]))
            return j + 3, None, (var, env[var] + (1 if tokens[j + 1] == "++" else -1))

        while i < len(tokens):
            if tokens[i] == "if":
                var, cmp, const = tokens[i + 1], tokens[i + 2], int(tokens[i + 3])
                holds = {"<": env[var] < const, ">": env[var] > const, "==": env[var] == const}[cmp]
                j, printed, effect = simple(i + 5)
                if not holds:
                    effect = None
            else:
                j, printed, effect = simple(i)
            if tokens[j - 1] != ";":
                raise ValueError(f"malformed statement at token {i}: {tokens[i:j]}")
            if effect is not None:
                if not LOW <= effect[1] <= HIGH:
                    raise ValueError(f"value {effect[1]} out of range")
                env[effect[0]] = effect[1]
            out += [NO_OUTPUT] * (j - i - 1) + [value_class(printed) if printed is not None else NO_OUTPUT]
            i = j
        return out

    def decode(self, x: np.ndarray) -> list[str]:
        return [self.vocab[i] for i in x]

    def check(self, example: Example) -> bool:
        tokens = self.decode(example.x)
        return (tokens[-3] == "print" and tokens.count(";") == self.num_statements
                and self.interpret(tokens) == example.y.tolist())
