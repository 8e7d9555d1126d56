"""Feature maps φ (Schlag et al. 2021, §5) and normalisations."""
import math

import pytest
import torch

from fastnet import make_core
from fastnet.feature_maps import FeatureMap, dpfp, elu_plus_one, favor_plus, redraw_random_features, sum_normalise


@pytest.mark.parametrize("d,nu", [(2, 1), (4, 1), (8, 3), (32, 2)])
def test_dpfp_output_size(d, nu):
    assert dpfp(torch.randn(5, d), nu).shape == (5, 2 * d * nu)
    assert FeatureMap("dpfp", d, dpfp_nu=nu).output_dim == 2 * d * nu


def test_dpfp_matches_eqs_33_to_36_on_2d_example():
    """In 2-d, DPFP-1's four features are exactly φ1..φ4 of Eqs. 33-36 (in some order)."""
    r = torch.relu
    for k in torch.randn(20, 2):
        expected = sorted([
            float(r(k[0]) * r(k[1])), float(r(-k[0]) * r(k[1])),
            float(r(k[0]) * r(-k[1])), float(r(-k[0]) * r(-k[1])),
        ])
        assert sorted(dpfp(k).tolist()) == pytest.approx(expected)
    # keys in different quadrants are orthogonal in feature space (Figure 1)
    quadrants = torch.tensor([[1.0, 2.0], [-1.5, 0.5], [0.7, -3.0], [-2.0, -1.0]])
    phi = dpfp(quadrants)
    gram = phi @ phi.t()
    assert torch.count_nonzero(gram - torch.diag(torch.diagonal(gram))) == 0
    assert (torch.diagonal(gram) > 0).all()


def test_elu_plus_one_is_positive_and_matches_eq_30():
    x = torch.tensor([-2.0, 0.0, 3.0])
    torch.testing.assert_close(elu_plus_one(x), torch.tensor([math.exp(-2.0), 1.0, 4.0]))


def test_favor_approximates_softmax_kernel():
    """E_R[φ(x)·φ(y)] = exp(x·y), the softmax kernel (Eqs. 31-32)."""
    torch.manual_seed(0)
    x, y = torch.randn(4) * 0.3, torch.randn(4) * 0.3
    R = torch.randn(200000, 4, dtype=torch.float64)
    est = (favor_plus(x.double(), R) * favor_plus(y.double(), R)).sum()
    assert float(est) == pytest.approx(math.exp(float(x @ y)), rel=0.02)


def test_favor_features_change_only_when_redrawn():
    """R stays fixed across forward calls in either mode (an unroll run step by step reads
    with the R it wrote with); redraw_random_features draws a new one."""
    torch.manual_seed(0)
    core = make_core("delta", 6, hidden_size=8, num_layers=1, num_heads=2, head_dim=4, ff_size=8,
                     feature_map="favor", favor_features=5).train()
    phi = core.layers[0].phi
    x, done = torch.randn(3, 2, 6), torch.zeros(3, 2, dtype=torch.bool)
    before = phi.projection.clone()
    y1, _, _ = core(x, core.initial_state(2, "cpu"), done)
    y2, _, _ = core(x, core.initial_state(2, "cpu"), done)
    torch.testing.assert_close(y1, y2)
    assert torch.equal(phi.projection, before)
    redraw_random_features(core)
    assert not torch.equal(phi.projection, before) and phi(torch.randn(3, 4)).shape == (3, 10)


def test_favor_step_mode_backward_after_a_redraw():
    """Training one step at a time (truncate_per_step) backpropagates through graphs that saved
    R; a redraw between two training batches must not modify that saved R in place."""
    torch.manual_seed(0)
    core = make_core("delta", 6, hidden_size=8, num_layers=1, num_heads=2, head_dim=4, ff_size=8,
                     feature_map="favor", favor_features=5).train()
    x, done = torch.randn(2, 2, 6), torch.zeros(1, 2, dtype=torch.bool)
    y1, state, _ = core(x[:1], core.initial_state(2, "cpu"), done)
    y2, _, _ = core(x[1:], state, done)
    redraw_random_features(core)
    (y1.sum() + y2.sum()).backward()
    assert all(p.grad is not None for p in core.parameters())


@pytest.mark.parametrize("name", ["tanh", "identity"])
@pytest.mark.parametrize("normalisation", ["sum", "attention"])
def test_normalising_a_signed_feature_map_is_an_error(name, normalisation):
    with pytest.raises(ValueError, match="normalisation divides by a sum"):
        FeatureMap(name, 8, normalisation=normalisation)
    with pytest.raises(ValueError, match="normalisation divides by a sum"):
        make_core("delta", 6, feature_map=name, normalisation=normalisation)
    assert FeatureMap(name, 8, normalisation="none")(torch.ones(8)).shape == (8,)


def test_sum_normalisation_is_applied_by_the_feature_map():
    x = torch.randn(5, 8)
    torch.testing.assert_close(FeatureMap("elu", 8, normalisation="sum")(x), sum_normalise(elu_plus_one(x)))


def test_sum_normalise_sums_to_one():
    x = elu_plus_one(torch.randn(6, 10))
    torch.testing.assert_close(sum_normalise(x, eps=0.0).sum(-1), torch.ones(6))


def test_bad_feature_map_options():
    with pytest.raises(ValueError, match="elu"):
        FeatureMap("relu", 4)
    with pytest.raises(ValueError, match="dpfp_nu"):
        FeatureMap("dpfp", 4, dpfp_nu=0)
