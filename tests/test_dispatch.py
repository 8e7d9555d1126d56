"""Kernel dispatch: the kernels modes (auto / triton / reference), DELTABEAST_KERNELS, and the
self-check of kernels=auto, with a GPU simulated on the CPU by Triton's interpreter."""
from __future__ import annotations

import os
import warnings

import pytest
import torch

from fastnet import make_core
from fastnet.kernels import dispatch

torch.set_num_threads(1)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported, as in test_kernels
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # the device of the tests that run kernels for real
KERNELS = ("fused_recurrent_fast_weight", "chunk_delta_rule", "fused_recurrent_rec_delta",
           "fused_recurrent_delta_rnn", "fused_recurrent_srwm")


@pytest.fixture(autouse=True)
def fresh_dispatch(monkeypatch):
    """Each test starts with no mode chosen and no self-check run, and leaves none behind."""
    monkeypatch.setattr(dispatch, "_mode", None)
    monkeypatch.setattr(dispatch, "_checked", {})
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    yield


def simulate_gpu(monkeypatch):
    """CPU tensors count as a device the kernels can run on (without CUDA they run in Triton's interpreter,
    set above). It sets no TRITON_INTERPRET itself: Triton reads it when it first compiles, so setting it
    here would break the tests on a real GPU that follow in the same process."""
    monkeypatch.setattr(dispatch, "kernels_can_run", lambda device: True)


def test_modes_env_var_and_errors(monkeypatch):
    assert dispatch.kernel_mode() == "auto"
    monkeypatch.setattr(dispatch, "_mode", None)
    monkeypatch.setenv(dispatch.ENV_VAR, "reference")
    assert dispatch.kernel_mode() == "reference"
    dispatch.set_kernel_mode("auto")  # the function wins over the environment
    assert dispatch.kernel_mode() == "auto"
    with pytest.raises(ValueError, match=r"\['auto', 'triton', 'reference'\]"):
        dispatch.set_kernel_mode("fast")
    monkeypatch.setattr(dispatch, "_mode", None)
    monkeypatch.setenv(dispatch.ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="DELTABEAST_KERNELS"):
        dispatch.kernel_mode()
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(RuntimeError, match="kernels=triton, but torch.cuda.is_available"):
            dispatch.set_kernel_mode("triton")


def test_reference_and_cpu_auto_never_use_kernels(monkeypatch):
    x = torch.zeros(2, 16)
    assert not dispatch.use_triton("fused_recurrent", x)  # auto, CPU: the reference, no self-check
    assert dispatch._checked == {}
    simulate_gpu(monkeypatch)
    dispatch.set_kernel_mode("reference")
    assert not dispatch.use_triton("fused_recurrent", x)
    assert dispatch._checked == {}


def test_auto_self_check_failure_warns_once_and_training_runs_on_the_reference(monkeypatch, tmp_path):
    """A machine where every kernel fails to compile: one warning naming the reason, then the
    supervised trainer trains on the reference, with the same results as kernels=reference."""
    from agents.learning.supervised import ModelConfig, train
    from envs.tasks import make_task
    from fastnet.kernels import ops
    from tests.test_supervised import make_config

    simulate_gpu(monkeypatch)

    def broken(*args, **kwargs):
        raise RuntimeError("PassManager::run failed (simulated compile failure)")

    for name in KERNELS:
        monkeypatch.setattr(ops, name, broken)
    calls = []
    real_self_check = dispatch.self_check
    monkeypatch.setattr(dispatch, "self_check", lambda device: calls.append(device) or real_self_check(device))

    def run(mode, run_dir):
        dispatch.set_kernel_mode(mode)
        cfg = make_config("retrieval1", "gated_delta", run_dir,
                          {"hidden_size": 16, "num_layers": 1, "num_heads": 1, "head_dim": 16, "ff_size": 16},
                          ModelConfig(kind="stack", embedding_size=8), batch_size=4, max_steps=3, eval_every=3,
                          eval_batch_size=8, checkpoint_every=0)
        return train(cfg, task=make_task("retrieval1", num_keys=4, seed=0), quiet=True)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        auto = run("auto", tmp_path / "auto")
    ours = [w for w in caught if "self-check failed" in str(w.message)]
    assert len(ours) == 1 and len(calls) == 1
    message = str(ours[0].message)
    assert "fused_recurrent: sum: RuntimeError: PassManager::run failed (simulated compile failure)" in message
    assert all(op in message for op in ("chunk", "rec_delta", "delta_rnn", "srwm"))
    assert all(why is not None for why in dispatch._checked.values())
    reference = run("reference", tmp_path / "ref")
    assert auto["steps"] == reference["steps"] == 3
    assert auto["test"] == reference["test"]


def test_auto_self_check_mismatch_falls_back_for_that_kernel_only(monkeypatch):
    """A kernel that runs but computes wrong values is caught by the self-check (values compared with
    the reference): only its ops fall back, and the core's output is the reference's."""
    from fastnet.kernels import cases, ops

    if DEV == "cpu":
        simulate_gpu(monkeypatch)
    real = ops.fused_recurrent_fast_weight
    monkeypatch.setattr(ops, "fused_recurrent_fast_weight", lambda *a, **kw: tuple(t * 1.01 for t in real(*a, **kw)))
    monkeypatch.setattr(cases, "CASES", {op: cases.CASES[op] for op in ("fused_recurrent", "rec_delta")})  # quicker
    with pytest.warns(RuntimeWarning, match=r"fused_recurrent: sum: mismatch against the reference \(tensor 0: "
                                            r"relative error 1\.00e-02\)") as caught:
        assert not dispatch.use_triton("fused_recurrent", torch.zeros(1, device=DEV))
    assert len(caught) == 1
    assert dispatch._checked["rec_delta"] is None and dispatch.use_triton("rec_delta", torch.zeros(1, device=DEV))


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_self_check_passes_when_the_first_call_comes_from_acting(monkeypatch, context):
    """The first kernel call may come from the inference server, under no_grad or inference_mode;
    the check still takes its gradients (on an H200 it failed there with "element 0 of tensors
    does not require grad" and the process fell back to the reference)."""
    from fastnet.kernels import cases

    if DEV == "cpu":
        simulate_gpu(monkeypatch)
    monkeypatch.setattr(cases, "CASES", {"fused_recurrent": cases.CASES["fused_recurrent"]})  # quicker
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed check warns
        with context():
            assert dispatch.use_triton("fused_recurrent", torch.zeros(1, device=DEV))
    assert dispatch._checked == {"fused_recurrent": None}


def test_self_check_names_where_a_bare_assert_failed(monkeypatch):
    """An exception with no message (Triton's own bare asserts) is reported by file, line and source."""
    from fastnet.kernels import cases, ops

    simulate_gpu(monkeypatch)

    def bare_assert(*args, **kwargs):
        raise AssertionError  # as ``assert cond`` raises it outside pytest's rewritten modules

    monkeypatch.setattr(ops, "fused_recurrent_fast_weight", bare_assert)
    monkeypatch.setattr(cases, "CASES", {"fused_recurrent": cases.CASES["fused_recurrent"]})
    with pytest.warns(RuntimeWarning, match=r"fused_recurrent: sum: AssertionError: at test_dispatch\.py:\d+ "
                                            r"\(raise AssertionError"):
        assert not dispatch.use_triton("fused_recurrent", torch.zeros(1))


def test_triton_mode_runs_the_kernels_in_a_core(monkeypatch):
    """kernels=triton (on the GPU, else in the interpreter on the CPU): a gated_delta core runs the fused
    kernel, no self-check, and matches kernels=reference."""
    from fastnet.kernels import ops

    torch.manual_seed(0)
    core = make_core("gated_delta", 8, hidden_size=16, num_layers=1, num_heads=1, head_dim=16, ff_size=16).to(DEV)
    x, done = torch.randn(5, 2, 8, device=DEV), torch.zeros(5, 2, dtype=torch.bool, device=DEV)
    done[2, 1] = True
    dispatch.set_kernel_mode("reference")
    y_ref, _, _ = core(x, core.initial_state(2, DEV), done)
    calls = []
    real = ops.gated_delta_rule
    monkeypatch.setattr(ops, "gated_delta_rule", lambda *a: calls.append(1) or real(*a))
    dispatch.set_kernel_mode("triton")
    y, _, _ = core(x, core.initial_state(2, DEV), done)
    assert calls and dispatch._checked == {}
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
