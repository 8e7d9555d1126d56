"""Word-level language modelling from text the user supplies (never downloaded).

``path`` is either a directory holding ``wiki.train.tokens``, ``wiki.valid.tokens`` and
``wiki.test.tokens`` (WikiText-103 layout), or one text file whose lines are split in
order into train / valid / test (90% / 5% / 5% by default). Words are whitespace-split and
every non-empty line ends with ``<eos>``; the vocabulary is the training words plus
``<unk>`` (valid/test words outside it become ``<unk>``).

Training: the training stream is cut into ``batch_size`` contiguous rows and read in
segments of ``segment_length`` tokens (the target is the next token). With
``carry_state`` False (the papers' default) each segment starts from a zero state.

Evaluation modes (``eval_mode``), the first two as the fwp-linear-transformers paper (§6.3) uses them:

* ``sliding`` (default): windows of ``segment_length`` tokens moved by ``eval_stride``; each
  window starts from a zero state and scores only its last ``eval_stride`` tokens (the first
  window scores all of its tokens), so every token is scored exactly once, with at least
  ``segment_length - eval_stride`` tokens of context after the first window. Stride 1 is the
  exact protocol; the default min(64, L) costs up to L/64 times less;
* ``carry``: the state is carried across segments ("full context");
* ``segment``: non-overlapping segments, each from a zero state (the training view: a quick
  estimate, pessimistic for the tokens early in each segment).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Optional

import numpy as np
import torch

from envs.tasks.base import Batch, Task, TaskSpec

UNK, EOS_WORD = "<unk>", "<eos>"


def tokenize(lines: list[str]) -> list[str]:
    words: list[str] = []
    for line in lines:
        parts = line.split()
        if parts:
            words += parts + [EOS_WORD]
    return words


class LanguageModel(Task):
    @dataclass
    class Config:
        """Word-level language modelling (WikiText-103's files, or any text file)."""

        path: str = ""
        """A text file, or a directory with wiki.{train,valid,test}.tokens (nothing is downloaded)."""
        segment_length: int = 256
        """L, the tokens per training segment."""
        eval_mode: Literal["sliding", "carry", "segment"] = "sliding"
        """sliding (each token scored once with up to L tokens of context), carry or segment."""
        eval_stride: Optional[int] = None
        """Tokens scored per window in sliding mode (null: min(64, L); 1 is the exact protocol)."""
        carry_state: bool = False
        """Carry the state across training segments."""
        split_fractions: tuple[float, float, float] = (0.9, 0.05, 0.05)
        """Train, valid and test fractions of a single text file."""

    def __init__(self, seed: int = 0, **options: Any):
        """``options``: the fields of :class:`Config`."""
        cfg = self.Config(**options)
        path, segment_length, eval_mode, eval_stride = cfg.path, cfg.segment_length, cfg.eval_mode, cfg.eval_stride
        carry_state, split_fractions = cfg.carry_state, cfg.split_fractions
        super().__init__(seed, {"train": None, "valid": None, "test": None})
        if eval_mode not in ("segment", "carry", "sliding"):
            raise ValueError(f"eval_mode must be sliding, carry or segment, got {eval_mode!r}")
        eval_stride = min(64, segment_length) if eval_stride is None else eval_stride
        if segment_length < 1 or not 1 <= eval_stride <= segment_length:
            raise ValueError(f"need segment_length >= 1 and 1 <= eval_stride <= segment_length, "
                             f"got {segment_length} and {eval_stride}")
        if not path or not os.path.exists(path):
            raise ValueError(f"language-model data not found at {path!r}: pass a text file or a "
                             "directory with wiki.{train,valid,test}.tokens (nothing is downloaded)")
        self.segment_length, self.eval_mode, self.eval_stride = segment_length, eval_mode, eval_stride
        self.carry_state = carry_state
        texts = self._read(path, split_fractions)
        self.vocab = [UNK] + sorted(set(texts["train"]) - {UNK})
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.streams = {s: np.array([self.index.get(w, 0) for w in words], dtype=np.int64)
                        for s, words in texts.items()}
        self.spec = TaskSpec(input_vocab=[len(self.vocab)], input_dim=None, output_size=len(self.vocab),
                             loss="ce", metric="ppl")

    @staticmethod
    def _read(path: str, fractions) -> dict[str, list[str]]:
        if os.path.isdir(path):
            out = {}
            for s in ("train", "valid", "test"):
                with open(os.path.join(path, f"wiki.{s}.tokens"), encoding="utf-8") as f:
                    out[s] = tokenize(f.readlines())
            return out
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
        a = int(len(lines) * fractions[0])
        b = a + int(len(lines) * fractions[1])
        return {"train": tokenize(lines[:a]), "valid": tokenize(lines[a:b]), "test": tokenize(lines[b:])}

    def split(self, name: str) -> np.ndarray:  # type: ignore[override]
        return self.streams[name]

    def epoch_size(self):
        return None

    def check(self, example) -> bool:
        return True

    @staticmethod
    def _rows(stream: np.ndarray, rows: int) -> np.ndarray:
        n = (len(stream) - 1) // rows
        if n < 1:
            raise ValueError(f"stream of {len(stream)} tokens is too short for {rows} rows")
        return np.stack([stream[i * n:i * n + n + 1] for i in range(rows)], axis=1)  # [n+1, rows]

    def _segments(self, data: np.ndarray, carry: bool) -> Iterator[Batch]:
        L = self.segment_length
        for t in range(0, data.shape[0] - 1, L):
            x = torch.from_numpy(data[t:t + L][: data.shape[0] - 1 - t])
            y = torch.from_numpy(data[t + 1:t + 1 + L])
            mask = torch.ones(x.shape, dtype=torch.bool)
            yield Batch(x, y, mask, mask, reset=not carry or t == 0)

    def train_batches(self, batch_size: int, seed: int = 0) -> Iterator[Batch]:
        data = self._rows(self.streams["train"], batch_size)
        while True:
            yield from self._segments(data, self.carry_state)

    def eval_batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        stream = self.streams[split]
        if self.eval_mode != "sliding":
            yield from self._segments(self._rows(stream, batch_size), self.eval_mode == "carry")
            return
        L, s = self.segment_length, self.eval_stride
        windows, last, start, prev_end = [], len(stream) - 1, 0, 0
        while prev_end < last:
            end = min(start + L, last)
            windows.append((start, end, prev_end - start))  # score the tokens not scored yet
            start, prev_end = start + s, end
        for i in range(0, len(windows), batch_size):
            chunk = windows[i:i + batch_size]
            T = max(e - b for b, e, _ in chunk)
            x = torch.zeros(T, len(chunk), dtype=torch.long)
            y = torch.zeros(T, len(chunk), dtype=torch.long)
            mask = torch.zeros(T, len(chunk), dtype=torch.bool)
            for j, (b, e, f) in enumerate(chunk):
                x[:e - b, j] = torch.from_numpy(stream[b:e])
                y[:e - b, j] = torch.from_numpy(stream[b + 1:e + 1])
                mask[f:e - b, j] = True
            yield Batch(x, y, mask, mask)
