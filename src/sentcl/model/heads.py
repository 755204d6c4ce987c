"""The MLP head SimCSE puts over the [CLS] vector: Linear(H, H) + tanh.

``train_only`` is SimCSE's ``mlp_only_train``: the head shapes the training objective but encoding
skips it. This flag lives here and nowhere else.
"""

from __future__ import annotations

import torch
from torch import nn


class MLPHead(nn.Module):
    def __init__(self, hidden_size: int, train_only: bool = False, init_std: float = 0.02):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()
        self.train_only = train_only
        # SimCSE initialises its MLP through BERT's _init_weights: N(0, initializer_range), bias 0.
        nn.init.normal_(self.dense.weight, mean=0.0, std=init_std)
        nn.init.zeros_(self.dense.bias)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(pooled))

    def used_when_encoding(self) -> bool:
        return not self.train_only
