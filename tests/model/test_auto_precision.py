"""``auto`` on a CPU picks the fastest path measured on this machine (model/auto_precision.py): the timing and
the choice on a fake clock, and the record written, reused, and measured again when the model, the machine or
a runtime changes (issue 60)."""

import json

import pytest

from sentcl.hardware import Hardware
from sentcl.model import ModelConfig, SentenceEncoder, auto_precision, for_inference
from sentcl.model import inference as inference_module

AVX2 = Hardware("cpu", "AVX2", frozenset({"avx2", "fma"}), mkldnn_bf16=False)
ZEN4 = Hardware("cpu", "AVX512", frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_vnni"}), True)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeModel:
    """Encoding costs ``seconds[i]`` of the fake clock on its i-th timed call (the warm-up is free)."""

    def __init__(self, clock, name, seconds, order):
        self.clock, self.name, self.seconds, self.order, self.calls = clock, name, list(seconds), order, 0

    def encode(self, texts, batch_size):
        if len(texts) > batch_size:  # a timed round (the warm-up encodes one batch)
            self.order.append(self.name)
            self.clock.now += self.seconds[self.calls]
            self.calls += 1


def test_each_candidate_is_timed_by_the_median_of_interleaved_rounds():
    clock, order = FakeClock(), []
    models = {
        "fp32": FakeModel(clock, "fp32", [2.0, 2.0, 9.0], order),  # one slow round: the median ignores it
        "int8": FakeModel(clock, "int8", [1.0, 1.5, 1.0], order),
    }
    speeds = auto_precision.time_candidates(
        {name: (lambda m=m: m) for name, m in models.items()}, ["t"] * 200, rounds=3, clock=clock
    )
    assert speeds == {"fp32": pytest.approx(100.0), "int8": pytest.approx(200.0)}
    assert order == ["fp32", "int8"] * 3  # interleaved round by round
    assert auto_precision.fastest(speeds) == "int8"
    assert auto_precision.fastest({"fp32": 100.0, "bf16": 100.0, "int8": 100.0}) == "fp32"  # a tie: simplest


def test_the_probe_is_the_same_everywhere():
    texts = auto_precision.probe_texts()
    assert texts == auto_precision.probe_texts() and len(texts) == auto_precision.PROBE_TEXTS
    assert min(len(t.split()) for t in texts) >= 4 and max(len(t.split()) for t in texts) <= 48


def tiny(tiny_model_dir, pooler="avg") -> SentenceEncoder:
    return SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler=pooler)).eval()


@pytest.fixture
def machine(monkeypatch, tmp_path, stsb_data_dir):
    """This machine seen as ``ZEN4`` (native bf16), its own cache, the tiny STS-B; every path keeps
    quality."""
    from sentcl.model import int8_gate

    seen = {"hardware": ZEN4}
    monkeypatch.setattr(inference_module, "detect", lambda device="cpu": seen["hardware"])
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SENTCL_DATA", str(stsb_data_dir))
    monkeypatch.setattr(int8_gate, "stsb_dev", lambda embedder, data_dir: 80.0)
    auto_precision._say.cache_clear()
    return seen


def test_the_record_is_written_reused_and_measured_again_when_model_machine_or_runtime_change(
    machine, tiny_model_dir, tmp_path, monkeypatch
):
    timed = []

    def fake_timing(candidates, texts):
        timed.append(sorted(candidates))
        return {name: {"fp32": 100.0, "bf16": 250.0, "int8": 200.0}[name] for name in candidates}

    monkeypatch.setattr(auto_precision, "time_candidates", fake_timing)
    chosen = for_inference(tiny(tiny_model_dir), "auto")
    assert isinstance(chosen, SentenceEncoder) and chosen.inference_autocast is not None  # bf16, the fastest
    (path,) = (tmp_path / "cache" / "auto-precision").glob("*.json")
    record = json.loads(path.read_text())
    assert record["chosen"] == "bf16" and record["speeds"] == {"fp32": 100.0, "bf16": 250.0, "int8": 200.0}
    assert record["machine"] and record["measured"] and record["protocol"] == auto_precision.PROTOCOL
    assert timed == [["bf16", "fp32", "int8"]]

    for_inference(tiny(tiny_model_dir), "auto")  # the same model on the same machine: the record
    assert len(timed) == 1
    for_inference(tiny(tiny_model_dir, pooler="cls_before_pooler"), "auto")  # another model
    assert len(timed) == 2
    machine["hardware"] = AVX2  # another machine: no bf16 candidate, and the record is its own
    for_inference(tiny(tiny_model_dir), "auto")
    assert timed[-1] == ["fp32", "int8"] and len(timed) == 3
    monkeypatch.setattr(auto_precision.torch, "__version__", "9.9.9")  # another runtime
    for_inference(tiny(tiny_model_dir), "auto")
    assert len(timed) == 4 and len(list((tmp_path / "cache" / "auto-precision").glob("*.json"))) == 4


def test_one_real_timing_on_this_machine(monkeypatch, tmp_path, tiny_model_dir, stsb_data_dir, caplog):
    """No fakes: the candidates this CPU has are timed, the fastest is taken and said at INFO."""
    import logging

    from sentcl.hardware import detect

    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SENTCL_DATA", str(stsb_data_dir))
    auto_precision._say.cache_clear()
    with caplog.at_level(logging.INFO, logger="sentcl.model.auto_precision"):
        for_inference(tiny(tiny_model_dir), "auto")
    (path,) = (tmp_path / "cache" / "auto-precision").glob("*.json")
    record = json.loads(path.read_text())
    assert record["chosen"] in record["speeds"] and "fp32" in record["speeds"]
    assert ("bf16" in record["speeds"] or "bf16" in record["excluded"]) == (
        detect("cpu").native_bf16 or "bf16" in record["excluded"]
    )
    if len(record["speeds"]) > 1:
        assert all(speed > 0 for speed in record["speeds"].values())
        assert record["speeds"][record["chosen"]] == max(record["speeds"].values())
    assert f"precision auto: {record['chosen']}, the" in caplog.text


def test_processes_that_start_together_measure_once_one_at_a_time(
    machine, tiny_model_dir, tmp_path, monkeypatch
):
    import multiprocessing
    import time

    log = tmp_path / "timed.txt"

    def slow_timing(candidates, texts):  # what each probe saw: was another one running at the same time?
        with log.open("a") as handle:
            handle.write("start\n")
        time.sleep(0.5)
        with log.open("a") as handle:
            handle.write("end\n")
        return {name: {"fp32": 100.0, "bf16": 250.0, "int8": 200.0}[name] for name in candidates}

    monkeypatch.setattr(auto_precision, "time_candidates", slow_timing)
    context = multiprocessing.get_context("fork")  # the children inherit the fake machine and timing

    def child(queue):
        queue.put(for_inference(tiny(tiny_model_dir), "auto").inference_autocast is not None)

    queue = context.Queue()
    children = [context.Process(target=child, args=(queue,)) for _ in range(3)]
    for process in children:
        process.start()
    for process in children:
        process.join(60)
    assert [process.exitcode for process in children] == [0, 0, 0]
    assert [queue.get(timeout=5) for _ in children] == [True, True, True]  # every one chose bf16
    assert log.read_text().split() == ["start", "end"]  # measured once; the others read its record


def _record_file(tmp_path):
    (path,) = (tmp_path / "cache" / "auto-precision").glob("*.json")
    return path


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"chosen": "int8", "excluded": {"int8": "STS-B dev 70.0 against fp32 80.0"}},
         "chosen int8 is one of its own excluded paths"),
        ({"machine": "AMD EPYC 9999, 2 threads, CPU AVX512"}, "not on this machine"),
        ({"chosen": "bogus"}, "chosen 'bogus' is not one of fp32, bf16, int8"),
        ({"speeds": "fast"}, "speeds 'fast' are not path → texts/s"),
        ({"chosen": "fp32"}, "chosen fp32, but its speeds make bf16 the fastest"),
    ],
    ids=["excluded-chosen", "another-cpu", "bogus", "speeds-text", "not-the-fastest"],
)  # fmt: skip
def test_a_record_that_does_not_hold_up_is_measured_again_with_one_warning(
    machine, tiny_model_dir, tmp_path, monkeypatch, caplog, change, words
):
    """Issue 70 item 3: a record was trusted whatever it said (int8 chosen while it excluded int8, another
    CPU's numbers, a bogus choice that failed every encode, speeds that were a traceback)."""
    import logging

    timed = []

    def fake_timing(candidates, texts):
        timed.append(sorted(candidates))
        return {name: {"fp32": 100.0, "bf16": 250.0, "int8": 200.0}[name] for name in candidates}

    monkeypatch.setattr(auto_precision, "time_candidates", fake_timing)
    for_inference(tiny(tiny_model_dir), "auto")
    path = _record_file(tmp_path)
    path.write_text(json.dumps(json.loads(path.read_text()) | change))
    auto_precision._say.cache_clear()
    with caplog.at_level(logging.WARNING, logger="sentcl.model.auto_precision"):
        chosen = for_inference(tiny(tiny_model_dir), "auto")
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("sentcl")
    ]
    assert len(warnings) == 1 and str(path) in warnings[0] and words in warnings[0], warnings
    assert len(timed) == 2 and json.loads(path.read_text())["chosen"] == "bf16"  # measured and rewritten
    assert chosen.inference_autocast is not None


def test_an_int8_choice_the_int8_gate_does_not_admit_is_measured_again(
    machine, tiny_model_dir, tmp_path, monkeypatch, caplog
):
    """The same record says int8, but the int8 gate's record (STS-B dev) excludes it."""
    import logging

    from sentcl.model import int8_gate

    monkeypatch.setattr(auto_precision, "time_candidates", lambda c, t: {n: 100.0 for n in c})
    machine["hardware"] = AVX2
    for_inference(tiny(tiny_model_dir), "auto")  # fp32 (a tie): the int8 gate's record is written
    path = _record_file(tmp_path)
    (gate,) = (tmp_path / "cache").rglob("int8-checks/*.json")
    gate.write_text(json.dumps(json.loads(gate.read_text()) | {"int8": 10.0}))  # int8 fails its gate
    record = json.loads(path.read_text())
    path.write_text(json.dumps(record | {"chosen": "int8", "speeds": {"fp32": 100.0, "int8": 300.0}}))
    with caplog.at_level(logging.WARNING, logger="sentcl.model.auto_precision"):
        chosen = for_inference(tiny(tiny_model_dir), "auto")
    assert "chosen int8, but the int8 gate's record" in caplog.text and str(
        int8_gate.record_path("x").parent
    ) in (caplog.text)
    assert isinstance(chosen, SentenceEncoder)  # not the int8 graph


def test_a_small_input_runs_in_fp32_without_measuring(machine, tiny_model_dir, tmp_path, monkeypatch):
    """Issue 70 item 8: the first encode of 20 lines waited minutes for a measurement it did not need."""
    timed = []
    monkeypatch.setattr(
        auto_precision, "time_candidates", lambda c, t: timed.append(c) or {n: 1.0 for n in c}
    )
    small = for_inference(tiny(tiny_model_dir), "auto", texts=20)
    assert small.inference_autocast is None and not timed  # fp32, nothing measured, no record
    assert not (tmp_path / "cache" / "auto-precision").exists() or not list(
        (tmp_path / "cache" / "auto-precision").glob("*.json")
    )
    for_inference(tiny(tiny_model_dir), "auto", texts=auto_precision.MEASURE_FROM)  # large: measured
    assert len(timed) == 1
    for_inference(tiny(tiny_model_dir), "auto", texts=20)  # then a small input uses the record
    assert len(timed) == 1
