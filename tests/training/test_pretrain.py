import json
import shutil

import pytest
import torch
from transformers import AutoModelForMaskedLM

from sentcl.config import ConfigError
from sentcl.data import DataError
from sentcl.data.sentences import SentencesDataset, SentenceTokens
from sentcl.model import ModelLoadError, SentenceEncoder
from sentcl.objectives.masked_lm import mask_tokens
from sentcl.training.kinds import replace_training
from sentcl.training.pretrain import load_pretrain_recipe, pretrain
from tests.conftest import SENTENCES
from tests.training.crash import crash_after_a_checkpoint

ARCHITECTURE = {
    "model_type": "bert", "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
    "intermediate_size": 64, "max_position_embeddings": 64,
}  # fmt: skip


def write_recipe(tmp_path, model: dict, train_file, output, **training):
    recipe = {
        "model": model,
        "data": {"train_files": [str(train_file)], "max_length": 16, "eval_sentences": 6},
        "masking": {"probability": 0.3, "whole_word": True},
        "training": {"output_dir": str(output), "batch_size": 8, "learning_rate": 3e-3, "max_steps": 12,
                     "eval_steps": 6, "eval_task": "", "logging_steps": 3, "seed": 5, **training},
    }  # fmt: skip
    path = tmp_path / f"{output.name}.yaml"
    path.write_text(json.dumps(recipe))  # JSON is YAML
    return path


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(SENTENCES * 6) + "\n")
    return path


def test_whole_word_masking_masks_every_piece_of_a_selected_word_together(tiny_model_dir):
    tokenizer = SentenceEncoder.load(str(tiny_model_dir)).tokenizer
    text = "zebras quizzically jump"  # words the tiny vocabulary splits into many pieces
    dataset = SentencesDataset(SentenceTokens([text] * 500, tokenizer, 32), range(500), "corpus")
    batch = dataset.collate([dataset[i] for i in range(500)])
    ids, mask, words = batch.input_ids[:, 0], batch.attention_mask[:, 0], batch.word_ids[:, 0]
    assert words.max() == 2 and (words[0] == 0).sum() > 2  # a word of several pieces
    torch.manual_seed(0)
    _, labels = mask_tokens(ids, mask, tokenizer, 0.3, words)
    selected = labels != -100
    for row in range(500):
        for word in range(3):
            pieces = selected[row][words[row] == word]
            assert pieces.all() or not pieces.any()  # all pieces of a word, or none
    share = torch.stack([selected[:, words[0] == w].any(1) for w in range(3)]).float().mean()
    assert share == pytest.approx(0.3, abs=0.03)  # per word, not per piece
    assert not selected[words == -1].any()  # [CLS], [SEP], padding


def test_from_scratch_learns_and_saves_a_loadable_masked_lm(tmp_path, corpus, tiny_model_dir):
    out = tmp_path / "scratch"
    model = {"architecture": ARCHITECTURE, "tokenizer": str(tiny_model_dir)}
    # eval_task: none, as in training, turns the STS probe off (the held-out MLM loss is still evaluated)
    recipe = write_recipe(tmp_path, model, corpus, out, max_steps=30, eval_task="none")
    result = pretrain(load_pretrain_recipe(recipe))
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    held_out = [r["eval"]["mlm_loss"] for r in records if "eval" in r]
    assert [r["step"] for r in records if "eval" in r] == [0, 6, 12, 18, 24, 30]
    vocabulary = len(SentenceEncoder.load(str(tiny_model_dir)).tokenizer)
    assert held_out[0] == pytest.approx(
        torch.log(torch.tensor(float(vocabulary))).item(), abs=0.5
    )  # ~uniform
    assert held_out[-1] < held_out[0] - 1.0  # it learns the corpus's words
    assert result.final_metrics["mlm_loss"] == held_out[-1]
    assert (out / "mlm_loss.png").stat().st_size > 1000
    card = (out / "model" / "README.md").read_text()  # its model card, as sentcl train writes one
    assert "pipeline_tag: fill-mask" in card and "from scratch" in card and "30 steps of masked-LM" in card
    assert f"| mlm_loss | {held_out[0]:.2f} | {held_out[-1]:.2f} |" in card
    full = AutoModelForMaskedLM.from_pretrained(str(out / "model"))  # saved with its head
    assert full.config.num_hidden_layers == 1
    encoder = SentenceEncoder.load(str(out / "model"), pooler="avg")  # and usable as a backbone
    assert encoder.encode(["a dog runs"]).shape == (1, 32)


def test_continues_a_checkpoint_and_resumes_bit_identically(
    tmp_path, corpus, tiny_model_dir, monkeypatch, caplog
):
    model = {"name_or_path": str(tiny_model_dir)}  # a BertModel without MLM head: a fresh one is added
    straight = pretrain(
        load_pretrain_recipe(write_recipe(tmp_path, model, corpus, tmp_path / "a", checkpoint_steps=4))
    )
    assert straight.steps == 12
    assert "the checkpoint has no masked-LM head, so a fresh one (random) is trained" in caplog.text
    caplog.clear()  # a masked LM with its head (the run just made) is continued without the warning
    again = {"name_or_path": str(tmp_path / "a" / "model")}
    pretrain(load_pretrain_recipe(write_recipe(tmp_path, again, corpus, tmp_path / "c", checkpoint_steps=4)))
    assert "no masked-LM head" not in caplog.text
    recipe = load_pretrain_recipe(write_recipe(tmp_path, model, corpus, tmp_path / "b", checkpoint_steps=4))
    with crash_after_a_checkpoint(monkeypatch):  # pre-training runs the training loop
        pretrain(recipe)
    pretrain(replace_training(recipe, resume=True))
    a = AutoModelForMaskedLM.from_pretrained(str(tmp_path / "a" / "model")).state_dict()
    b = AutoModelForMaskedLM.from_pretrained(str(tmp_path / "b" / "model")).state_dict()
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    original = AutoModelForMaskedLM.from_pretrained(str(tiny_model_dir)).state_dict()
    key = "bert.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(a[key], original[key])  # it did train


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"name_or_path": "x", "architecture": ARCHITECTURE}, "exactly one of"),
        ({"architecture": ARCHITECTURE}, "model.tokenizer: required"),
        ({"architecture": {**ARCHITECTURE, "num_hiden_layers": 2}, "tokenizer": "T"}, "num_hiden_layers"),
        ({"architecture": {**ARCHITECTURE, "model_type": "nope"}, "tokenizer": "T"}, "unknown model type"),
        ({"architecture": {**ARCHITECTURE, "max_position_embeddings": 8}, "tokenizer": "T"}, "max_length"),
    ],
)
def test_bad_recipes_name_the_key(tmp_path, corpus, tiny_model_dir, model, message):
    if model.get("tokenizer") == "T":
        model = {**model, "tokenizer": str(tiny_model_dir)}
    with pytest.raises(ConfigError, match=message):
        pretrain(load_pretrain_recipe(write_recipe(tmp_path, model, corpus, tmp_path / "bad")))
    assert not (tmp_path / "bad" / "model").exists()


def test_too_few_sentences_for_the_held_out_share_is_an_error(tmp_path, tiny_model_dir):
    small = tmp_path / "small.txt"
    small.write_text("a dog runs\na cat sleeps\n")
    model = {"architecture": ARCHITECTURE, "tokenizer": str(tiny_model_dir)}
    with pytest.raises(DataError, match=r"small\.txt"):
        pretrain(load_pretrain_recipe(write_recipe(tmp_path, model, small, tmp_path / "s")))


def test_continued_pretraining_on_a_domains_corpus(tmp_path, tiny_model_dir):
    """data.corpus_unit: a BEIR corpus of documents, split into sentences, is what the MLM reads."""
    folder = tmp_path / "beir"
    folder.mkdir()
    documents = [" ".join(SENTENCES[i : i + 3]).replace(" a ", ". A ") + "." for i in range(0, 12, 3)] * 4
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": str(i), "title": "", "text": d}) + "\n" for i, d in enumerate(documents))
    )
    path = write_recipe(tmp_path, {"name_or_path": str(tiny_model_dir)}, folder, tmp_path / "run")
    recipe = json.loads(path.read_text())
    recipe["data"]["corpus_unit"] = "sentence"
    path.write_text(json.dumps(recipe))
    result = pretrain(load_pretrain_recipe(path))
    assert result.steps == 12 and (tmp_path / "run" / "model").is_dir()
    recipe["data"]["corpus_unit"] = "paragraph"
    path.write_text(json.dumps(recipe))
    with pytest.raises(
        ConfigError, match=r"data\.corpus_unit: 'paragraph' is not one of none, sentence, document"
    ):
        load_pretrain_recipe(path)


def test_a_continued_sentence_transformers_model_keeps_its_encoding_length(tmp_path, corpus, tiny_model_dir):
    """The start's sentence_bert_config.json goes with the model: it and what is trained from it encode to
    the start's length (all-MiniLM-L6-v2: 256), not to its tokenizer's (512); none without one."""
    start = tmp_path / "start"
    shutil.copytree(tiny_model_dir, start)
    plain = pretrain(
        load_pretrain_recipe(write_recipe(tmp_path, {"name_or_path": str(start)}, corpus, tmp_path / "p"))
    )
    assert not (plain.output_dir / "model" / "sentence_bert_config.json").exists()
    default = SentenceEncoder.load(str(plain.output_dir / "model")).max_length
    settings = {"max_seq_length": 24, "do_lower_case": False}
    (start / "sentence_bert_config.json").write_text(json.dumps(settings))
    kept = pretrain(
        load_pretrain_recipe(write_recipe(tmp_path, {"name_or_path": str(start)}, corpus, tmp_path / "k"))
    )
    assert json.loads((kept.output_dir / "model" / "sentence_bert_config.json").read_text()) == settings
    assert SentenceEncoder.load(str(kept.output_dir / "model")).max_length == 24 != default
    (start / "sentence_bert_config.json").write_text("{ nope")  # one line naming the file, nothing written
    with pytest.raises(ModelLoadError, match=r"start/sentence_bert_config\.json:1: invalid JSON"):
        pretrain(
            load_pretrain_recipe(write_recipe(tmp_path, {"name_or_path": str(start)}, corpus, tmp_path / "b"))
        )
    assert not (tmp_path / "b" / "model").exists()
