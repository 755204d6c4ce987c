import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from sentcl.data import ContrastiveDataset, DataError, Records


@pytest.fixture
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def test_unsupervised_two_identical_views_with_dynamic_padding(tokenizer):
    records = Records("mem", [("a dog",), ("the small dog jumps in the park",)], [1, 2])
    dataset = ContrastiveDataset(records, tokenizer, max_length=32)
    batch = dataset.collate([dataset[0], dataset[1]])
    longest = len(tokenizer("the small dog jumps in the park")["input_ids"])
    assert batch.shape == (2, 2, longest)
    assert torch.equal(batch.input_ids[:, 0], batch.input_ids[:, 1])
    assert batch.attention_mask[0, 0].sum() == len(tokenizer("a dog")["input_ids"])
    assert (batch.input_ids[0, 0, batch.attention_mask[0, 0] == 0] == tokenizer.pad_token_id).all()
    assert batch.indices.tolist() == [0, 1]


def test_supervised_triplets_and_truncation(tokenizer):
    long = " ".join(["dog"] * 50)
    records = Records("mem", [("a man", "a person", long)], [1])
    dataset = ContrastiveDataset(records, tokenizer, max_length=8)
    batch = dataset.collate([dataset[0]])
    assert batch.shape == (1, 3, 8)
    assert batch.attention_mask[0, 2].sum() == 8
    assert batch.input_ids[0, 2, -1] == tokenizer.sep_token_id  # truncation keeps [SEP]


def test_view_count_must_match_columns(tokenizer):
    records = Records("pairs.csv", [("a", "b")], [1])
    with pytest.raises(DataError, match="2 columns but 3 views"):
        ContrastiveDataset(records, tokenizer, n_views=3)


def test_group_by_length_keeps_every_example_and_cuts_padding():
    import numpy as np
    import torch

    from sentcl.data.collate import group_by_length

    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 33, size=1030)
    order = torch.randperm(1030, generator=torch.Generator().manual_seed(1))
    grouped = group_by_length(order, lengths, 64, torch.Generator().manual_seed(2), span=4)
    assert sorted(grouped.tolist()) == list(range(1030))  # a permutation: nothing lost, nothing twice
    again = group_by_length(order, lengths, 64, torch.Generator().manual_seed(2), span=4)
    assert torch.equal(grouped, again)  # deterministic given the generator (exact resume)

    def padding(o):
        batches = [lengths[o[i : i + 64].numpy()] for i in range(0, len(o), 64)]
        return sum(int(b.max()) * len(b) - int(b.sum()) for b in batches)

    assert padding(grouped) < 0.5 * padding(order)
    assert len(grouped[16 * 64 :]) == 1030 - 16 * 64  # the partial batch stays last


def test_a_token_budget_bounds_each_sorted_batch_and_keeps_every_row_once(tokenizer):
    from sentcl.data.collate import batch_bounds, sorted_batches

    assert batch_bounds(np.array([9, 5, 4, 2, 2, 1]), 4, None) == [(0, 4), (4, 6)]
    # 10 tokens: one row of 9, two of 5 (5, 4), four of 2 (capped by batch_size 4 it would be 4 anyway)
    assert batch_bounds(np.array([9, 5, 4, 2, 2, 1]), 4, 10) == [(0, 1), (1, 3), (3, 6)]
    assert batch_bounds(np.array([30, 3]), 8, 10) == [(0, 1), (1, 2)]  # longer than the budget: alone
    sentences = [" ".join(["word"] * n) for n in (1, 30, 2, 12, 7, 3, 25, 1)]
    seen = []
    for rows, batch in sorted_batches(tokenizer, sentences, 64, 8, False, max_tokens=40):
        assert batch.input_ids.shape[0] == 1 or batch.input_ids.shape[0] * batch.input_ids.shape[2] <= 40
        seen += rows.tolist()
    assert sorted(seen) == list(range(len(sentences)))
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match="max_tokens must be a positive integer"):
            next(sorted_batches(tokenizer, sentences, 64, 8, False, max_tokens=bad))
