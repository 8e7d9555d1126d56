"""Feature maps φ (Schlag et al. 2021, §5) and normalisations."""
import math

import pytest
import torch

from fastnet.feature_maps import FeatureMap, dpfp, elu_plus_one, favor_plus, sum_normalise


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


def test_favor_redraws_in_training_and_is_fixed_in_eval():
    phi = FeatureMap("favor", 8, favor_features=16)
    x = torch.randn(3, 8)
    phi.eval()
    torch.testing.assert_close(phi(x), phi(x))
    before = phi.projection.clone()
    phi.redraw()
    assert not torch.equal(before, phi.projection)
    assert phi(x).shape == (3, 32)


def test_sum_normalise_sums_to_one():
    x = elu_plus_one(torch.randn(6, 10))
    torch.testing.assert_close(sum_normalise(x, eps=0.0).sum(-1), torch.ones(6))


def test_bad_feature_map_options():
    with pytest.raises(ValueError, match="elu"):
        FeatureMap("relu", 4)
    with pytest.raises(ValueError, match="dpfp_nu"):
        FeatureMap("dpfp", 4, dpfp_nu=0)
