"""``auto`` on a CPU: the fastest path measured on this machine, among those that keep the model's quality.

Which precision is fastest is not a property of a CPU flag: measured with all-MiniLM-L6-v2, int8 was 2×
fp32 on an AVX2-only Zen 3, bf16 won on an AMX Xeon, int8 beat bf16 on a Zen 4 with avx512_bf16
(docs/benchmarks.md). So ``auto`` measures, once per model and machine:

* the candidates: fp32 (always); bf16 autocast where the CPU multiplies bf16 natively (emulated bf16 is never
  the faster one); int8 (ONNX Runtime) where the model's int8 passed the quality gate of
  ``model/int8_gate.py`` (STS-B dev within ``TOLERANCE`` of fp32; no data on disk: int8 is not a candidate);
  bf16 is held to the same tolerance when STS-B dev is on disk (without it, admitted unchecked, as its
  autocast keeps fp32 accumulation — the record says which);
* the probe: ``PROBE_TEXTS`` texts of 4–48 words (a fixed seed over a fixed word list, so every machine times
  the same texts), encoded ``ROUNDS`` times per candidate after a warm-up, the candidates interleaved round
  by round; a candidate's speed is the median of its rounds (texts/s);
* the choice: the fastest admitted candidate.

The record, ``$SENTCL_CACHE/auto-precision/<key>.json``, says what was measured, when and on what; its key
hashes the model (int8_gate's key: weights, pooler, head, modules), the CPU (its model name, the instruction
flags that decide kernels, torch's dispatch level, the threads) and the runtimes' versions, so a record of
another machine, model or runtime is never reused. The choice and its numbers are logged at INFO.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import functools
import logging
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from sentcl.evaluation.data_dir import DataDirError, resolve_data_dir
from sentcl.hardware import Hardware, describe_machine
from sentcl.hub_files import cache_dir
from sentcl.model import int8_gate

logger = logging.getLogger(__name__)

PROBE_TEXTS = 256
#: the fewest texts whose encoding is worth measuring for (without a record): the measurement encodes STS-B
#: dev's 3,000 sentences in each precision and times 256 texts per path, a minute or more on 2 cores
MEASURE_FROM = 50_000
ROUNDS = 3
#: bump when the probe or the timing changes, so older records are measured again
PROTOCOL = "probe-256x3-v1"
_VOCABULARY = (
    "the a man woman child dog cat car street park house city music ball book food water day night "
    "plays reads runs walks eats drives sings cooks holds jumps sleeps looks finds opens writes makes "
    "small old young red blue green happy quiet fast slow new long short first last other many few "
    "in on at with from under over near into after before while because although and or but not"
)
_WORDS = tuple(_VOCABULARY.split(" "))
#: CPU flags that decide which kernels run (the others do not change a timing's meaning)
_KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16",
                 "amx_int8", "amx_tile")  # fmt: skip


def probe_texts(count: int = PROBE_TEXTS, seed: int = 0) -> list[str]:
    """The texts every machine times: 4–48 words each, the same for a given seed."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 48))) + "." for _ in range(count)]


@dataclass
class AutoRecord:
    key: str
    source: str
    machine: str
    measured: str  # ISO time
    protocol: str
    speeds: dict[str, float]  # texts/s, the median of the rounds
    quality: dict[str, float | None]  # STS-B dev Spearman ×100 where measured
    excluded: dict[str, str] = field(default_factory=dict)  # candidate → why it was not timed
    chosen: str = "fp32"

    def describe(self) -> str:
        left = "; ".join(f"{name}: {why}" for name, why in self.excluded.items())
        others = f"; not candidates: {left}" if left else ""
        if len(self.speeds) == 1:
            return f"{self.chosen}, the only candidate on {self.machine}{others}"
        ranked = sorted(self.speeds.items(), key=lambda item: -item[1])
        speeds = ", ".join(f"{name} {speed:.1f}/s" for name, speed in ranked)
        return f"{self.chosen}, the fastest of {speeds} (measured {self.measured} on {self.machine}){others}"


def machine_key(hardware: Hardware) -> dict:
    """What a timing depends on besides the model: the CPU, its kernel flags, torch's level and threads and
    the runtimes' versions."""
    try:
        import onnxruntime

        runtime = onnxruntime.__version__
    except ImportError:
        runtime = None
    name = describe_machine().split(",")[0]
    flags = sorted(flag for flag in _KERNEL_FLAGS if flag in hardware.cpu_flags)
    return {
        "cpu": name, "flags": flags, "capability": hardware.cpu_capability,
        "threads": torch.get_num_threads(), "torch": torch.__version__, "onnxruntime": runtime,
        "protocol": PROTOCOL,
    }  # fmt: skip


def record_key(encoder, hardware: Hardware) -> tuple[str, str]:
    """(the record's key, the model's key: int8_gate's for its int8 check; the weights hashed once)."""
    machine = machine_key(hardware)
    with torch.no_grad():
        model = int8_gate.model_key(encoder, hardware.vnni, str(machine["onnxruntime"]))
    return int8_gate.digest_key([model, machine]), model


def record_path(key: str) -> Path:
    return cache_dir() / "auto-precision" / f"{key}.json"


#: the paths ``auto`` chooses among
PATHS = ("fp32", "bf16", "int8")


def load_record(
    key: str, model: str | None = None, hardware: Hardware | None = None, warn: str = "measuring again"
) -> AutoRecord | None:
    """This model's record on this machine, or None: none yet, or one that does not hold up (its schema, its
    own consistency, this machine, the int8 gate's record), said in one WARNING naming the file and ending
    with ``warn`` (what happens instead; empty: said already)."""
    path = record_path(key)
    record = int8_gate.read_record(path, AutoRecord, key, "auto-precision record")
    if record is None:
        return None
    problem = record_problem(record, model, hardware)
    if problem:
        if warn:
            logger.warning("%s: %s; %s", path, problem, warn)
        return None
    return record


def _speed(value) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def record_problem(
    record: AutoRecord, model: str | None = None, hardware: Hardware | None = None
) -> str | None:
    """Why ``record`` cannot be trusted here, or None: a field of the wrong form, a choice its own numbers
    contradict, another machine's measurement, or an int8 choice the int8 gate's record does not admit."""
    if record.protocol != PROTOCOL:
        return f"protocol {record.protocol!r}, not {PROTOCOL!r}"
    speeds, excluded, quality = record.speeds, record.excluded, record.quality
    if (
        not isinstance(speeds, dict)
        or not speeds
        or not all(name in PATHS and _speed(value) for name, value in speeds.items())
    ):
        return f"speeds {speeds!r} are not path → texts/s"
    if not isinstance(excluded, dict) or not all(
        name in PATHS and isinstance(why, str) for name, why in excluded.items()
    ):
        return f"excluded {excluded!r} is not path → reason"
    if not isinstance(quality, dict) or not all(v is None or _speed(v) for v in quality.values()):
        return f"quality {quality!r} is not path → STS-B dev"
    if record.chosen not in PATHS:
        return f"chosen {record.chosen!r} is not one of {', '.join(PATHS)}"
    if record.chosen in excluded:
        return f"chosen {record.chosen} is one of its own excluded paths ({excluded[record.chosen]})"
    if set(speeds) & set(excluded):
        return f"{', '.join(sorted(set(speeds) & set(excluded)))} both timed and excluded"
    if record.chosen != fastest(speeds):
        return f"chosen {record.chosen}, but its speeds make {fastest(speeds)} the fastest"
    if not isinstance(record.machine, str) or record.machine != describe_machine():
        return f"measured on {record.machine!r}, not on this machine ({describe_machine()})"
    if record.chosen == "bf16" and hardware is not None and not hardware.native_bf16:
        return f"chosen bf16, but {hardware.describe()} has no native bf16"
    if record.chosen == "int8" and model is not None:
        gate = int8_gate.load_record(model)
        if gate is None or not gate.passed:
            return (
                f"chosen int8, but the int8 gate's record ({int8_gate.record_path(model)}) does not admit it"
            )
    return None


def interleaved_medians(
    actions: dict[str, Callable[[], object]],
    rounds: int = ROUNDS,
    clock: Callable[[], float] = time.perf_counter,
    warm_up: bool = True,
) -> dict[str, float]:
    """Each action's median seconds over ``rounds`` rounds, after one warm-up call each (first calls allocate,
    export, load kernels) unless the caller warmed them up; the actions interleaved round by round, so a
    noisy neighbour slows them alike."""
    seconds: dict[str, list[float]] = {name: [] for name in actions}
    for action in actions.values() if warm_up else ():
        action()
    for _ in range(rounds):
        for name, action in actions.items():
            started = clock()
            action()
            seconds[name].append(clock() - started)
    return {name: statistics.median(values) for name, values in seconds.items()}


def time_candidates(
    candidates: dict[str, Callable[[], object]],
    texts: list[str],
    rounds: int = ROUNDS,
    clock: Callable[[], float] = time.perf_counter,
    batch_size: int = 64,
) -> dict[str, float]:
    """texts/s of each candidate (``name → a function that readies it and returns the model``), timed by
    ``interleaved_medians`` after a warm-up of one batch (readying is not timed)."""
    models = {name: ready() for name, ready in candidates.items()}
    for model in models.values():
        model.encode(texts[:batch_size], batch_size=batch_size)  # type: ignore[attr-defined]
    medians = interleaved_medians(
        {name: functools.partial(model.encode, texts, batch_size=batch_size)  # type: ignore[attr-defined]
         for name, model in models.items()},
        rounds, clock, warm_up=False,
    )  # fmt: skip
    return {name: len(texts) / max(value, 1e-9) for name, value in medians.items()}


def fastest(speeds: dict[str, float]) -> str:
    """The fastest candidate; on a tie, the simpler one (fp32, then bf16, then int8)."""
    order = ("fp32", "bf16", "int8")
    return max(speeds, key=lambda name: (speeds[name], -order.index(name) if name in order else -9))


@contextlib.contextmanager
def measuring_alone(key: str) -> Iterator[None]:
    """Held while this machine's record ``key`` is read or measured: processes that start together (Ray
    actors, the workers of a device list) measure one at a time, so no probe is timed against another, and
    those that waited read the record the first one wrote."""
    path = record_path(key).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def choose_on_cpu(
    encoder, hardware: Hardware, data_dir: str | Path | None = None, texts: int | None = None
) -> tuple:
    """(the model to encode with, its record) for ``auto`` on the CPU: the fastest admitted path, from the
    record of this model on this machine or measured now (once; one process at a time). ``texts``: how many
    texts the caller will encode; below ``MEASURE_FROM`` with no record yet, fp32 without measuring (record
    None): the measurement would cost more than the fastest path saves on them."""
    key, model = record_key(encoder, hardware)
    small = texts is not None and texts < MEASURE_FROM
    record = load_record(
        key, model, hardware, warn="not used; fp32 for this input" if small else "measuring again"
    )
    if record is None and small:
        _say(
            f"fp32 for {texts:,} texts, not measured: below {MEASURE_FROM:,} texts measuring the fastest "
            f"path (STS-B dev in each precision, then a timing) costs more than it saves; a larger input "
            f"or --measure-precision measures it once and records it"
        )
        return encoder.with_dtype("fp32"), None
    if record is None:
        with measuring_alone(key):
            return _measured(encoder, hardware, data_dir, key, model)
    return _with_choice(encoder, record, None, model)


def _measured(encoder, hardware: Hardware, data_dir, key: str, model) -> tuple:
    record = load_record(key, model, hardware, warn="")  # written by a process this one waited for
    int8_model = None
    if record is None:
        candidates: dict[str, Callable[[], object]] = {"fp32": lambda: encoder.with_dtype("fp32")}
        excluded: dict[str, str] = {}
        quality: dict[str, float | None] = {}
        folder = _stsb_folder(data_dir)
        if not hardware.native_bf16:
            excluded["bf16"] = f"{hardware.describe()}: no native bf16 products (emulated: slower than fp32)"
        elif folder is None:  # nothing to check it on: admitted unchecked (its autocast accumulates in fp32)
            candidates["bf16"] = lambda: encoder.with_dtype("bf16")
        else:
            fp32, bf16 = (
                round(int8_gate.stsb_dev(encoder.with_dtype(d), folder), 4) for d in ("fp32", "bf16")
            )
            quality |= {"fp32": fp32, "bf16": bf16}
            if fp32 - bf16 <= int8_gate.TOLERANCE:
                candidates["bf16"] = lambda: encoder.with_dtype("bf16")
            else:
                excluded["bf16"] = f"STS-B dev {bf16:.2f} against fp32 {fp32:.2f}"
        int8_model, why, check = int8_gate.int8_candidate(encoder, hardware, data_dir, model)
        if check is not None:
            quality.setdefault("fp32", check.fp32)
            quality["int8"] = check.int8
        if int8_model is not None:
            candidates["int8"] = lambda: int8_model
        else:
            excluded["int8"] = why
        if len(candidates) > 1:
            logger.info("precision auto: timing %s on this machine once (recorded in %s)",
                        ", ".join(candidates), record_path(key))  # fmt: skip
            speeds = time_candidates(candidates, probe_texts())
        else:  # nothing to choose between: no timing
            speeds = {"fp32": 0.0}
        record = AutoRecord(
            key=key, source=str(encoder.source), machine=describe_machine(),
            measured=datetime.datetime.now().isoformat(timespec="seconds"), protocol=PROTOCOL,
            speeds={name: round(speed, 2) for name, speed in speeds.items()}, quality=quality,
            excluded=excluded, chosen=fastest(speeds),
        )  # fmt: skip
        int8_gate.write_record(record_path(key), record)
    return _with_choice(encoder, record, int8_model, model)


def _with_choice(encoder, record: AutoRecord, int8_model, model) -> tuple:
    _say(record.describe())
    if record.chosen == "int8":
        return (int8_model or int8_gate.int8_export(encoder, model)), record
    return encoder.with_dtype(record.chosen), record


def _stsb_folder(data_dir: str | Path | None) -> Path | None:
    """The data folder with STS-B on disk to hold a path to its quality (never downloaded), or None."""
    try:
        folder = resolve_data_dir(data_dir, download=False)
    except DataDirError:
        return None
    return folder if (folder / "stsb").is_dir() else None


@functools.cache
def _say(message: str) -> None:
    logger.info("precision auto: %s", message)
