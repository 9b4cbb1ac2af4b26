"""The GPU clock the LLM harness reads before each timed GPU run (bench/gpu_clock.py): nvidia-smi's
answer parsed, a missing or failing nvidia-smi giving no reader, rows carrying the samples and
marked gpu_clock_low when their median is under half the maximum (and not when it is not),
re-runs replacing the first attempt's samples, and the table saying so."""

import stat
import sys

import pytest

from dasllama.bench import gpu_clock, llm, record


def test_parse_nvidia_smi_lines():
    assert gpu_clock._parse("1980, 1980\n") == (1980.0, 1980.0)
    assert gpu_clock._parse("345 MHz, 1980 MHz\n1980, 1980\n") == (345.0, 1980.0)
    assert gpu_clock._parse("[N/A], 1980") is None
    assert gpu_clock._parse("") is None


def _fake_smi(tmp_path, out, code=0):
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({out!r})\nsys.exit({code})\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_reader_from_nvidia_smi(tmp_path):
    read = gpu_clock.nvidia_smi_reader(_fake_smi(tmp_path, "1410, 1980\n"))
    assert read is not None and read() == (1410.0, 1980.0)
    assert gpu_clock.nvidia_smi_reader(_fake_smi(tmp_path, "oops", code=9)) is None
    assert gpu_clock.nvidia_smi_reader(str(tmp_path / "absent")) is None


def test_summary_marks_a_low_median():
    low = gpu_clock.summarize_clock([(345.0, 1980.0), (1980.0, 1980.0), (375.0, 1980.0)])
    assert low == {"gpu_sm_clock_mhz": [345.0, 1980.0, 375.0], "gpu_sm_clock_max_mhz": 1980.0,
                   "gpu_clock_low": True}
    high = gpu_clock.summarize_clock([(1980.0, 1980.0), (345.0, 1980.0), (1965.0, 1980.0)])
    assert high["gpu_clock_low"] is False
    assert gpu_clock.summarize_clock([None, None]) == {}


class Engine:
    def __init__(self, name, ns=1000):
        self.name, self.ns = name, ns
        self.version, self.threads, self.details = "x", 2, {}

    def vocab(self):
        return (100, 1, True)

    def run(self, test, tokens):
        return self.ns * len(tokens)

    def top(self, tokens, k=5):
        return [1]


def test_rows_carry_the_clock_read_before_each_run():
    readings = iter([(1980.0, 1980.0)] * 2 + [(345.0, 1980.0)] * 2 + [(1980.0, 1980.0)] * 100)
    out = llm.measure("m.gguf", [Engine("dasllama"), Engine("llama.cpp")],
                      [llm.TestSpec("pp", 8), llm.TestSpec("tg", 2)], reps=2, noise_cv=None,
                      clock=lambda: next(readings))
    # runs alternate: dasllama rep 0, llama.cpp rep 0, dasllama rep 1, llama.cpp rep 1
    assert out["clocks"]["dasllama"]["pp8"] == [(1980.0, 1980.0), (345.0, 1980.0)]
    model = {"file": "m.gguf", "sha256": "0" * 64, "arch": "llama", "quant": "Q8_0",
             "params": 1, "bytes_per_token": 1, "flops_per_token": 1}
    tests = [llm.TestSpec("pp", 8), llm.TestSpec("tg", 2)]
    rows = llm.rows_for(Engine("llama.cpp"), model, out["samples"]["llama.cpp"], tests,
                        clocks=out["clocks"]["llama.cpp"])
    assert rows[0]["gpu_sm_clock_mhz"] == [1980.0, 345.0] and rows[1]["gpu_clock_low"] is False
    rows[0]["gpu_clock_low"] = True
    text = record.format_table({"rows": rows})
    assert "GPU clock low" in text
    plain = llm.rows_for(Engine("llama.cpp"), model, out["samples"]["llama.cpp"], tests)
    assert "gpu_sm_clock_mhz" not in plain[0]


def test_a_rerun_replaces_the_first_attempts_clock_samples():
    times = iter([1000, 3000, 1000, 1000, 1000, 1000] + [1000] * 50)

    class Noisy(Engine):
        def run(self, test, tokens):
            return next(times) * len(tokens)

    n = [0]

    def clock():
        n[0] += 1
        return (float(n[0]), 1980.0)

    out = llm.measure("m.gguf", [Noisy("dasllama")], [llm.TestSpec("pp", 4)], reps=3,
                      noise_cv=0.03, clock=clock)
    assert out["reruns"]["dasllama"]["pp4"]["first_cv"] > 0.03
    assert out["clocks"]["dasllama"]["pp4"] == [(4.0, 1980.0), (5.0, 1980.0), (6.0, 1980.0)]


def test_a_cpu_benchmark_reads_no_clock(tmp_path):
    from dasllama.testing import write_random_model
    path = write_random_model(tmp_path / "m.gguf", "llama", weight_type="Q8_0")
    res = llm.benchmark([path], {"dasllama": lambda p, threads, n_ctx: _Closable("dasllama")},
                        threads=2, reps=1, n_prompt=4, n_gen=0, pause=0)
    assert "gpu_sm_clock_mhz" not in res["rows"][0]
    with pytest.raises(llm.BenchError):
        llm.benchmark([path], {}, threads=2, reps=0, n_prompt=4, n_gen=0)


class _Closable(Engine):
    def __init__(self, name):
        super().__init__(name)
        self.vocab = lambda: (512, 1, False)

    def memory(self):
        return {}

    def close(self):
        pass
