"""Supervised benchmark generators (docs/supervised.md): ``make_task(name, seed=..., **options)``.

Task names: retrieval1, retrieval2 (associative retrieval settings 1 and 2), code3, code5
(code execution with 3 / 5 variables), listops10, listops15 (sequential ListOps depth 10 /
15), dict (MNM dictionary inference; ``num_pairs``, ``seq_len``), double_copy,
priority_sort, lm (word-level language modelling from ``path``).
"""
from __future__ import annotations

from envs.tasks.base import Batch, Example, Task, TaskSpec, collate
from envs.tasks.code_execution import CodeExecution
from envs.tasks.language_model import LanguageModel
from envs.tasks.listops import ListOps
from envs.tasks.mnm import DictionaryInference, DoubleCopy, PrioritySort
from envs.tasks.retrieval import AssociativeRetrieval
from fastnet.options import check_choice

TASKS = {
    "retrieval1": (AssociativeRetrieval, {"setting": 1}),
    "retrieval2": (AssociativeRetrieval, {"setting": 2}),
    "code3": (CodeExecution, {"num_variables": 3}),
    "code5": (CodeExecution, {"num_variables": 5}),
    "listops10": (ListOps, {"depth": 10}),
    "listops15": (ListOps, {"depth": 15}),
    "dict": (DictionaryInference, {}),
    "double_copy": (DoubleCopy, {}),
    "priority_sort": (PrioritySort, {}),
    "lm": (LanguageModel, {}),
}


def make_task(name: str, seed: int = 0, **options) -> Task:
    """Build task ``name``; ``options`` override the generator's defaults (e.g. num_keys=4)."""
    check_choice(name, TASKS, kind="task")
    cls, defaults = TASKS[name]
    return cls(seed=seed, **{**defaults, **options})


__all__ = ["TASKS", "make_task", "Task", "TaskSpec", "Example", "Batch", "collate", "AssociativeRetrieval",
           "CodeExecution", "ListOps", "DictionaryInference", "DoubleCopy", "PrioritySort", "LanguageModel"]
