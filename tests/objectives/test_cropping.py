"""Independent cropping (Contriever): spans of the document's own tokens, of the drawn share, special tokens
put back; the loss is in-batch InfoNCE over the two spans' vectors."""

import pytest
import torch

from sentcl.config import ConfigError
from sentcl.data import Batch
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.objectives import Cropping, CroppingConfig, info_nce_loss
from sentcl.objectives.cropping import random_crop

SPECIAL = torch.tensor([0, 101, 102])  # pad, [CLS], [SEP]


def document(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([[101, *range(1000, 1000 + n), 102, 0, 0]])
    return ids, (ids != 0).long()


@pytest.mark.parametrize("ratio_min,ratio_max", [(0.1, 0.5), (0.5, 0.5), (1.0, 1.0)])
def test_a_span_is_a_contiguous_piece_of_the_drawn_share(ratio_min, ratio_max):
    ids, mask = document(40)
    config = CroppingConfig(ratio_min=ratio_min, ratio_max=ratio_max, deletion=0.0)
    torch.manual_seed(0)
    for _ in range(50):
        spans, span_mask = random_crop(ids, mask, SPECIAL, config, 0)
        row = spans[0][span_mask[0].bool()].tolist()
        assert row[0] == 101 and row[-1] == 102
        inner = row[1:-1]
        assert inner == list(range(inner[0], inner[0] + len(inner)))  # contiguous, in order
        assert int(40 * ratio_min) <= len(inner) <= int(40 * ratio_max)


def test_deletion_removes_tokens_but_keeps_one():
    ids, mask = document(200)
    config = CroppingConfig(ratio_min=1.0, ratio_max=1.0, deletion=0.5)
    torch.manual_seed(1)
    lengths = [int(random_crop(ids, mask, SPECIAL, config, 0)[1].sum()) - 2 for _ in range(40)]
    assert 80 < sum(lengths) / len(lengths) < 120  # ≈ half of 200 kept
    one, one_mask = document(1)
    spans, _ = random_crop(one, one_mask, SPECIAL, CroppingConfig(deletion=0.9), 0)
    assert spans[0].tolist()[:3] == [101, 1000, 102]  # never empty


def test_the_loss_is_infonce_over_the_two_spans(tiny_model_dir):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg"))
    objective = Cropping(CroppingConfig(temperature=0.1), encoder)
    embeddings = torch.randn(5, 2, 8)
    expected = info_nce_loss(embeddings[:, 0], embeddings[:, 1], temperature=0.1)
    assert objective.loss_from_embeddings(embeddings).loss.item() == pytest.approx(expected.item(), rel=1e-6)
    tokens = encoder.tokenizer(["a man plays the ball in the park with a dog", "the cat sleeps in the house"],
                               padding=True, return_tensors="pt")  # fmt: skip
    output = objective(
        Batch(tokens["input_ids"][:, None], tokens["attention_mask"][:, None], torch.arange(2))
    )
    output.loss.backward()
    assert torch.isfinite(output.loss) and set(output.terms) == {"cropping"}


def test_the_ratios_are_checked():
    with pytest.raises(ConfigError, match="need 0 < ratio_min ≤ ratio_max ≤ 1"):
        CroppingConfig(ratio_min=0.6, ratio_max=0.5).validate()
