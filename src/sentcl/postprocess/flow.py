"""BERT-flow (Li et al., EMNLP 2020): a Glow-style normalising flow, fitted by maximum likelihood on frozen
sentence embeddings, maps them to a standard Gaussian; the Gaussian-space vectors are the new embeddings.

Each of ``n_steps`` flow steps is Glow's (Kingma & Dhariwal 2018) block on a vector:
  ActNorm (data-initialised scale and bias) → invertible linear map (LU-parametrised, Glow's 1×1 conv)
  → affine coupling (half the coordinates set the scale and shift of the other half).

    log p(x) = log N(f(x); 0, I) + Σ_steps log |det ∂f_step/∂input|
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import torch
from torch import nn
from tqdm.auto import tqdm

from sentcl.postprocess.base import PostProcessor


class ActNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.zeros(dim))

    @torch.no_grad()
    def initialize(self, x: torch.Tensor) -> None:
        self.bias.copy_(-x.mean(0))
        self.log_scale.copy_(-torch.log(x.std(0) + 1e-6))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x + self.bias) * torch.exp(self.log_scale), self.log_scale.sum().expand(x.shape[0])


class InvertibleLinear(nn.Module):
    permutation: torch.Tensor  # buffers
    sign: torch.Tensor
    lower_mask: torch.Tensor

    """W = P L (U + diag(sign · e^{log_s})); log|det W| = Σ log_s."""

    def __init__(self, dim: int, generator: torch.Generator):
        super().__init__()
        q = torch.linalg.qr(torch.randn(dim, dim, generator=generator, dtype=torch.float64))[0].numpy()
        p, lower, upper = scipy.linalg.lu(q)
        s = np.diag(upper)
        self.register_buffer("permutation", torch.tensor(p, dtype=torch.float32))
        self.register_buffer("sign", torch.tensor(np.sign(s), dtype=torch.float32))
        self.register_buffer("lower_mask", torch.tril(torch.ones(dim, dim), -1))
        self.lower = nn.Parameter(torch.tensor(lower, dtype=torch.float32))
        self.upper = nn.Parameter(torch.tensor(np.triu(upper, 1), dtype=torch.float32))
        self.log_s = nn.Parameter(torch.tensor(np.log(np.abs(s)), dtype=torch.float32))

    def weight(self) -> torch.Tensor:
        eye = torch.eye(self.lower.shape[0], device=self.lower.device)
        lower = self.lower * self.lower_mask + eye
        upper = self.upper * self.lower_mask.T + torch.diag(self.sign * torch.exp(self.log_s))
        return self.permutation @ lower @ upper

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x @ self.weight().T, self.log_s.sum().expand(x.shape[0])


class AffineCoupling(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.kept = dim // 2  # the coordinates that set the scale and shift of the others
        last = nn.Linear(hidden, 2 * (dim - self.kept))
        self.net = nn.Sequential(nn.Linear(self.kept, hidden), nn.ReLU(), last)
        nn.init.zeros_(last.weight)  # Glow: start close to the identity
        nn.init.zeros_(last.bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kept, changed = x[:, : self.kept], x[:, self.kept :]
        raw_scale, shift = self.net(kept).chunk(2, dim=1)
        # Glow's scale σ(h + 2), its log taken as log σ directly: log(σ(·)) underflows to −inf once the net
        # pushes h below ≈ −100, and one such row turned the whole fit to NaN (a weak encoder's [CLS])
        log_scale = nn.functional.logsigmoid(raw_scale + 2.0)
        return torch.cat([kept, (changed + shift) * torch.exp(log_scale)], dim=1), log_scale.sum(1)


class GlowFlow(nn.Module):
    def __init__(self, dim: int, n_steps: int, hidden: int, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        layers: list[nn.Module] = []
        for _ in range(n_steps):
            layers += [ActNorm(dim), InvertibleLinear(dim, generator), AffineCoupling(dim, hidden)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_det = torch.zeros(x.shape[0], device=x.device)
        for layer in self.layers:
            x, step_log_det = layer(x)
            log_det = log_det + step_log_det
        return x, log_det

    def log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        z, log_det = self(x)
        return -0.5 * (z**2 + math.log(2 * math.pi)).sum(1) + log_det

    @torch.no_grad()
    def initialize(self, x: torch.Tensor) -> None:
        for layer in self.layers:
            if isinstance(layer, ActNorm):
                layer.initialize(x)
            x, _ = layer(x)


class Flow(PostProcessor):
    """Fit ``GlowFlow`` on the embeddings (Adam, mini-batches), then use f(x) as the embedding.

    The loss is the negative log-likelihood per dimension, and the gradient's global norm is clipped at
    ``max_grad_norm`` (1.0, as bohanli/BERT-flow clips its flow gradients in optimization_bert_flow.py):
    without it one spike of the gradient (~5,000× its median) wrecked the fit on a weak encoder's [CLS]. A fit
    whose loss still becomes non-finite raises ``FloatingPointError`` instead of returning NaN embeddings.
    """

    name = "flow"

    def __init__(
        self,
        n_steps: int = 4,
        hidden: int = 256,
        epochs: int = 10,
        batch_size: int = 256,
        learning_rate: float = 1e-3,
        seed: int = 0,
        dim: int | None = None,
        max_grad_norm: float | None = 1.0,
    ):
        self.n_steps, self.hidden, self.epochs = n_steps, hidden, epochs
        self.max_grad_norm = max_grad_norm
        self.batch_size, self.learning_rate, self.seed, self.dim = batch_size, learning_rate, seed, dim
        self.model: GlowFlow | None = GlowFlow(dim, n_steps, hidden, seed) if dim else None
        #: mean log-likelihood per dimension after initialisation and after each epoch
        self.history: list[float] = []

    def _fitted(self) -> GlowFlow:
        if self.model is None:
            raise RuntimeError("Flow: fit before transform")
        return self.model

    def _mean_log_likelihood(self, x: torch.Tensor) -> float:
        model = self._fitted()
        with torch.no_grad():
            return float(torch.cat([model.log_likelihood(b) for b in x.split(4096)]).mean()) / x.shape[1]

    def fit(self, embeddings: np.ndarray) -> Flow:
        embeddings = np.asarray(embeddings)
        bad = int((~np.isfinite(embeddings)).any(axis=1).sum())
        if bad:
            raise ValueError(
                f"flow: {bad} of the {len(embeddings)} embeddings to fit on are not finite (NaN or inf)"
            )
        x = torch.tensor(embeddings, dtype=torch.float32)
        self.dim = x.shape[1]
        torch.manual_seed(self.seed)
        self.model = GlowFlow(self.dim, self.n_steps, self.hidden, self.seed)
        self.model.initialize(x[: min(len(x), 4096)])
        optimizer = torch.optim.Adam(self.model.parameters(), lr=self.learning_rate)
        generator = torch.Generator().manual_seed(self.seed)
        self.history = [self._mean_log_likelihood(x)]
        for epoch in tqdm(range(self.epochs), desc="fitting flow", unit="epoch", disable=len(x) < 5000):
            for step, index in enumerate(torch.randperm(len(x), generator=generator).split(self.batch_size)):
                loss = -self.model.log_likelihood(x[index]).mean() / self.dim
                if not torch.isfinite(loss):
                    raise FloatingPointError(
                        f"flow: the fit diverged (non-finite log-likelihood at epoch {epoch + 1}, "
                        f"batch {step + 1}; "
                        f"per-dimension log-likelihood so far {[round(h, 3) for h in self.history]}): "
                        f"lower learning_rate ({self.learning_rate}) or max_grad_norm ({self.max_grad_norm})"
                    )
                optimizer.zero_grad()
                loss.backward()
                if self.max_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
                optimizer.step()
            self.history.append(self._mean_log_likelihood(x))
        return self

    def transform(self, embeddings: np.ndarray) -> np.ndarray:
        model = self._fitted()
        with torch.no_grad():
            x = torch.tensor(np.asarray(embeddings), dtype=torch.float32)
            return torch.cat([model(b)[0] for b in x.split(4096)]).numpy().astype(np.float64)

    def options(self) -> dict:
        return {
            "n_steps": self.n_steps,
            "hidden": self.hidden,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "seed": self.seed,
            "dim": self.dim,
            "max_grad_norm": self.max_grad_norm,
        }

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy() for k, v in self._fitted().state_dict().items()}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self._fitted().load_state_dict({k: torch.from_numpy(v) for k, v in arrays.items()})
