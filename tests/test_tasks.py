"""The supervised task generators agree with their ground-truth checkers; splits are
disjoint and reproducible (docs/supervised.md; issue 8)."""
import numpy as np
import pytest
import torch

from envs.tasks import (
    AssociativeRetrieval,
    CodeExecution,
    DictionaryInference,
    DoubleCopy,
    LanguageModel,
    ListOps,
    PrioritySort,
    collate,
    make_task,
)
from envs.tasks.code_execution import HIGH, LOW, value_class
from envs.tasks.listops import VOCAB, depth_of, evaluate

SMALL = {"train": 40, "valid": 10, "test": 10}


def small_tasks(seed=0):
    return {
        "retrieval1": AssociativeRetrieval(1, num_keys=6, seed=seed),
        "retrieval2": AssociativeRetrieval(2, num_keys=6, seed=seed),
        "code3": CodeExecution(3, seed=seed, sizes=SMALL),
        "code5": CodeExecution(5, seed=seed, sizes=SMALL),
        "listops10": ListOps(10, seed=seed, sizes=SMALL),
        "listops15": ListOps(15, seed=seed, sizes=SMALL),
        "dict": DictionaryInference(num_pairs=8, seq_len=4, seed=seed, sizes={"valid": 10, "test": 10}),
        "dict_l1": DictionaryInference(num_pairs=4, seq_len=1, seed=seed, sizes={"valid": 10, "test": 10}),
        "double_copy": DoubleCopy(seed=seed, sizes={"valid": 10, "test": 10}),
        "priority_sort": PrioritySort(seed=seed, sizes={"valid": 10, "test": 10}),
    }


def all_splits(task):
    out = {s: task.split(s) for s in ("valid", "test")}
    if task.sizes["train"] is not None:
        out["train"] = task.split("train")
    else:
        rng = np.random.default_rng(123)
        out["train"] = [task.generate(rng) for _ in range(20)]
    return out


@pytest.mark.parametrize("name", list(small_tasks()))
def test_generators_agree_with_checkers(name):
    task = small_tasks()[name]
    for split, examples in all_splits(task).items():
        assert examples, split
        for e in examples:
            assert task.check(e), (name, split)


@pytest.mark.parametrize("name", list(small_tasks()))
def test_checkers_reject_wrong_targets(name):
    task = small_tasks()[name]
    e = task.split("valid")[0]
    y = e.y.copy()
    t = int(np.flatnonzero(e.mask)[-1])
    if y.dtype == np.float32:
        y[t] = 1.0 - y[t]
    else:
        y[t] = (y[t] + 1) % task.spec.output_size
    bad = type(e)(e.x, y, e.mask, e.metric_mask)
    assert not task.check(bad)


@pytest.mark.parametrize("name", list(small_tasks()))
def test_splits_disjoint_and_reproducible(name):
    a, b, other = small_tasks(0)[name], small_tasks(0)[name], small_tasks(1)[name]
    keys = {}
    for split in ("train", "valid", "test"):
        if a.sizes[split] is None:
            continue
        ea, eb = a.split(split), b.split(split)
        assert [e.key() for e in ea] == [e.key() for e in eb], "not reproducible"
        assert [e.key() for e in ea] != [e.key() for e in other.split(split)], "seed ignored"
        keys[split] = {e.key() for e in ea}
        assert len(keys[split]) == len(ea), "duplicates inside a split"
    names = list(keys)
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            assert not keys[names[i]] & keys[names[j]], (names[i], names[j])


def test_training_stream_avoids_eval_examples():
    task = AssociativeRetrieval(2, num_keys=2, seed=0)  # tiny space: collisions are certain
    held_out = {e.key() for s in ("valid", "test") for e in task.split(s)}
    batches = task.train_batches(16)
    for _ in range(20):
        batch = next(batches)
        for b in range(batch.batch_size):
            x = batch.x[:, b].numpy()
            y = batch.y[:, b].numpy()
            from envs.tasks.base import Example
            assert Example(x, y, batch.mask[:, b].numpy()).key() not in held_out


def test_retrieval_settings():
    t1 = AssociativeRetrieval(1, num_keys=20)
    e = t1.split("valid")[0]
    assert e.x.shape == (21, 2) and len(set(e.x[:20, 0])) == 20 and len(set(e.x[:20, 1])) == 20
    assert len(t1.split("valid")) == 20 * 20  # 20 sequences x all S queries
    t2 = AssociativeRetrieval(2, num_keys=20)
    e = t2.generate(np.random.default_rng(0))
    assert e.x.shape == (41, 2) and e.y.shape == (41, 20) and e.mask.tolist() == [False] * 40 + [True]
    # with replacement: over many sequences some key is rebound
    rng = np.random.default_rng(0)
    assert any(len(set(t2.generate(rng).x[:40, 0])) < 40 for _ in range(5))


def test_code_execution_statistics():
    task = CodeExecution(3, sizes={"train": 50, "valid": 5, "test": 5})
    lengths = [len(e) for e in task.split("train")]
    assert 350 < np.mean(lengths) < 550  # paper: ~450 tokens
    for e in task.split("train"):
        tokens = task.decode(e.x)
        assert tokens.count(";") == 100 and tokens[-3] == "print"
        assert e.mask.all() and e.metric_mask[-1]
        printed = e.y[e.metric_mask]
        assert (printed >= value_class(LOW)).all() and (printed <= value_class(HIGH)).all()
    assert task.interpret("x = 3 ; x ++ ; if x > 3 : y = 1 ; print y ; print x ;".split()) == (
        [0] * 4 + [0] * 3 + [0] * 9 + [0, 0, value_class(1)] + [0, 0, value_class(4)])


def test_listops_depth_and_evaluator():
    assert evaluate("[MAX 6 1 [FIRST 2 3 ] 0 [MIN 4 7 1 ] ]".split()) == 6
    assert evaluate("[MIN [MAX 1 9 ] 5 ]".split()) == 5
    for depth in (10, 15):
        task = ListOps(depth, sizes={"train": 100, "valid": 5, "test": 5})
        lengths = []
        for e in task.split("train"):
            tokens = [VOCAB[i] for i in e.x]
            assert depth_of(tokens) == depth
            lengths.append(len(tokens))
        assert {10: 60, 15: 120}[depth] < np.mean(lengths) < {10: 140, 15: 300}[depth]


def test_mnm_layouts():
    e = DictionaryInference(num_pairs=4, seq_len=1).generate(np.random.default_rng(0))
    assert len(e) == 4 * 4 + 1 + 2 + 1 and e.mask.sum() == 1
    e = DoubleCopy().generate(np.random.default_rng(0))
    assert len(e) == 151 and e.mask.sum() == 100
    e = PrioritySort().generate(np.random.default_rng(0))
    assert e.x.shape == (37, 10) and e.y.shape == (37, 8) and e.mask.sum() == 16


def test_collate_pads_at_the_end():
    task = ListOps(3, sizes={"train": 10, "valid": 2, "test": 2})
    examples = task.split("train")[:4]
    batch = collate(examples)
    T = max(len(e) for e in examples)
    assert batch.x.shape == (T, 4)
    for b, e in enumerate(examples):
        assert batch.mask[:, b].sum() == 1 and batch.mask[len(e) - 1, b]
        assert torch.equal(batch.x[:len(e), b], torch.from_numpy(e.x))


def write_corpus(path, lines=300, seed=0):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(30)]
    with open(path, "w") as f:
        for _ in range(lines):
            f.write(" ".join(rng.choice(words, rng.integers(3, 12))) + "\n")
    return str(path)


@pytest.mark.parametrize("mode", ["segment", "carry", "sliding"])
def test_language_model_streams(tmp_path, mode):
    path = write_corpus(tmp_path / "corpus.txt")
    task = LanguageModel(path=path, segment_length=16, eval_mode=mode, eval_stride=4)
    assert task.vocab[0] == "<unk>" and "<eos>" in task.vocab
    stream = task.split("valid")
    scored = 0
    for batch in task.eval_batches("valid", 4):
        assert batch.x.shape == batch.y.shape
        scored += int(batch.mask.sum())
        # targets are the next token
        T = batch.x.shape[0]
        if T > 1:
            m = batch.mask[:-1] & batch.mask[1:]
            assert torch.equal(batch.y[:-1][m], batch.x[1:][m])
    if mode == "sliding":
        assert scored == len(stream) - 1  # every token scored exactly once
    else:
        assert scored == ((len(stream) - 1) // 4) * 4
    b = next(task.train_batches(4))
    assert b.x.shape == (16, 4)


def test_make_task_names():
    assert make_task("retrieval2", num_keys=4).L == 8
    with pytest.raises(ValueError, match="valid tasks"):
        make_task("nope")
    with pytest.raises(ValueError, match="nothing is downloaded"):
        make_task("lm", path="/does/not/exist")


def test_length_bucketing_keeps_every_example_once_per_epoch():
    task = ListOps(10, sizes={"train": 64, "valid": 2, "test": 2}, bucket=4)
    plain = ListOps(10, sizes={"train": 64, "valid": 2, "test": 2})
    seen, padding, plain_padding = [], 0, 0
    it, it_plain = task.train_batches(8), plain.train_batches(8)
    for _ in range(8):  # one epoch
        b, p = next(it), next(it_plain)
        padding += int(b.x.shape[0] * 8 - sum(int(torch.nonzero(b.mask[:, i])[0]) + 1 for i in range(8)))
        plain_padding += int(p.x.shape[0] * 8 - sum(int(torch.nonzero(p.mask[:, i])[0]) + 1 for i in range(8)))
        for i in range(8):
            n = int(torch.nonzero(b.mask[:, i])[0]) + 1
            seen.append(tuple(b.x[:n, i].tolist()))
    assert sorted(seen) == sorted(tuple(e.x.tolist()) for e in task.split("train"))
    assert padding < plain_padding


@pytest.mark.parametrize("segment_length,eval_stride", [(16, 0), (16, -2), (16, 17), (0, 1)])
def test_language_model_rejects_strides_that_would_hang_or_skip_tokens(tmp_path, segment_length, eval_stride):
    path = write_corpus(tmp_path / "corpus.txt")
    with pytest.raises(ValueError, match="eval_stride <= segment_length"):
        LanguageModel(path=path, segment_length=segment_length, eval_stride=eval_stride)
    assert LanguageModel(path=path, segment_length=8).eval_stride == 8  # the default stride fits short segments
    assert LanguageModel(path=path, segment_length=256).eval_stride == 64


def test_a_task_with_too_few_distinct_examples_is_an_error_not_a_hang():
    """ListOps of depth 1 with 2 arguments has 3 x 100 distinct programs: a 400-example training
    split cannot exist, and a batch larger than the training set cannot be drawn."""
    from envs.tasks import base, listops
    too_big = ListOps(depth=1, sizes={"train": 400, "valid": 1, "test": 1})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(listops, "MAX_ARGS", 2)
        mp.setattr(base, "MAX_REJECTED_DRAWS", 2000)
        with pytest.raises(ValueError, match="too few distinct examples"):
            too_big.split("train")
        small = ListOps(depth=1, sizes={"train": 8, "valid": 1, "test": 1})
        with pytest.raises(ValueError, match="batch_size 16 is larger than the training set"):
            next(small.train_batches(16))
    for bad in (lambda: ListOps(depth=0), lambda: CodeExecution(num_statements=1)):
        with pytest.raises(ValueError, match=">= 1|>= 2"):
            bad()
