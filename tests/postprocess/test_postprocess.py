import numpy as np
import pytest

from sentcl.postprocess import (
    AllButTheTop,
    Flow,
    PostProcessedEmbedder,
    Whitening,
    fit_postprocessor,
    load_postprocessor,
)


@pytest.fixture
def anisotropic():
    rng = np.random.default_rng(0)
    mixing = rng.normal(size=(12, 12)) * np.linspace(3, 0.1, 12)
    return rng.normal(size=(800, 12)) @ mixing + 5.0


def test_whitening_gives_identity_covariance(anisotropic):
    out = Whitening().fit(anisotropic).transform(anisotropic)
    np.testing.assert_allclose(out.mean(0), 0, atol=1e-9)
    np.testing.assert_allclose(np.cov(out, rowvar=False), np.eye(12), atol=1e-8)
    reduced = Whitening(k=4).fit(anisotropic).transform(anisotropic)
    assert reduced.shape == (800, 4)
    np.testing.assert_allclose(np.cov(reduced, rowvar=False), np.eye(4), atol=1e-8)


def test_all_but_the_top_is_orthogonal_to_removed_directions(anisotropic):
    abtt = AllButTheTop(n_components=3).fit(anisotropic)
    out = abtt.transform(anisotropic)
    np.testing.assert_allclose(out @ abtt.directions.T, 0, atol=1e-8)
    np.testing.assert_allclose(out.mean(0), 0, atol=1e-8)
    assert AllButTheTop().fit(np.zeros((5, 384)) + np.arange(384)).directions.shape == (4, 384)  # ≈ d/100


def test_flow_log_likelihood_rises_and_output_is_closer_to_gaussian(anisotropic):
    flow = Flow(n_steps=3, hidden=32, epochs=8, batch_size=64, seed=0).fit(anisotropic)
    assert flow.history[-1] > flow.history[0]
    # no collapse on the way
    assert all(b >= a - 0.05 for a, b in zip(flow.history, flow.history[1:], strict=False))
    z = flow.transform(anisotropic)
    assert abs(z.mean()) < 0.2 and 0.5 < z.std() < 1.5


@pytest.mark.parametrize("processor", [Whitening(k=6), AllButTheTop(2), Flow(n_steps=2, hidden=16, epochs=1)])
def test_save_load_roundtrip(tmp_path, anisotropic, processor):
    processor.fit(anisotropic)
    processor.save(tmp_path / "pp", fitted_on="unit test")
    loaded = load_postprocessor(tmp_path / "pp")
    np.testing.assert_allclose(loaded.transform(anisotropic), processor.transform(anisotropic), atol=1e-5)


def test_wrapper_is_an_embedder(anisotropic):
    class Raw:
        def encode(self, sentences):
            return anisotropic[[int(s) for s in sentences]]

    sentences = [str(i) for i in range(800)]
    whitening = fit_postprocessor(Whitening(), Raw(), sentences)
    out = PostProcessedEmbedder(Raw(), whitening).encode(sentences[:5])
    assert out.shape == (5, 12) and out.dtype == np.float32
    with pytest.raises(ValueError, match="at least two"):
        fit_postprocessor(Whitening(), Raw(), ["0"])


def test_flow_coupling_log_determinant_stays_finite_when_its_scale_underflows():
    """σ(h + 2) underflows to 0 in float32 for h ≲ −105; its log is taken as logsigmoid, so the fit's
    log-likelihood stays finite (a weak encoder's [CLS] once turned the whole fit to NaN here)."""
    import torch

    from sentcl.postprocess.flow import AffineCoupling

    coupling = AffineCoupling(4, 8)
    with torch.no_grad():
        coupling.net[-1].bias[:2] = -200.0  # the scale half of the output
    out, log_det = coupling(torch.ones(3, 4))
    assert torch.isfinite(out).all()
    assert torch.isfinite(log_det).all()
    np.testing.assert_allclose(log_det.detach().numpy(), -2 * 198.0, rtol=1e-6)


def test_flow_refuses_non_finite_input_and_a_diverging_fit(anisotropic):
    bad = anisotropic.copy()
    bad[[3, 7], 0] = np.nan
    with pytest.raises(ValueError, match="2 of the 800 embeddings"):
        Flow(n_steps=2, hidden=16, epochs=1).fit(bad)
    with pytest.raises(FloatingPointError, match=r"diverged.*learning_rate"):
        Flow(n_steps=2, hidden=16, epochs=3, learning_rate=1e12, max_grad_norm=None).fit(anisotropic * 1e6)


def test_flow_clips_the_gradient_norm(anisotropic, monkeypatch):
    import torch

    norms = []
    clip = torch.nn.utils.clip_grad_norm_

    def spy(parameters, max_norm, *args, **kwargs):
        norms.append(max_norm)
        return clip(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    Flow(n_steps=2, hidden=16, epochs=1, batch_size=400).fit(anisotropic)
    assert norms == [1.0, 1.0]
    norms.clear()
    Flow(n_steps=2, hidden=16, epochs=1, batch_size=400, max_grad_norm=None).fit(anisotropic)
    assert norms == []
