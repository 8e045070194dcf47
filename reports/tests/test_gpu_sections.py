"""The report's device-run parts on synthetic inputs: a mechanism is named only by a switch that makes
compiled bit-equal to eager; nearer-to-fp64 is read from both statistics; a GPU run's copy yardstick
is never the host's memcpy; task E on the GPU is decided by the suite's prediction interval."""

from __future__ import annotations

from reports import claims
from reports.results import copy_bandwidth
from reports.sections import gpu_mechanisms


def variant(name, bit_equal, differ, ulp_max, ulp_p99, status="ok"):
    return {"name": name, "status": status, "bit_equal_eager": bit_equal, "n_diff_eager": differ,
            "ulp_vs_fp64": {"max": ulp_max, "p99": ulp_p99}}  # fmt: skip


def case(variants, eager=(0, 0)):
    return {"id": "div/f32", "eager": {"ulp_vs_fp64": {"max": eager[0], "p99": eager[1]}},
            "output": {"n_elements": 100}, "variants": variants}  # fmt: skip


def test_a_switch_that_makes_compiled_equal_eager_names_the_mechanism():
    found = gpu_mechanisms.case_finding(
        case(
            [
                variant("default", False, 29, 2, 1),
                variant("eager_numerics.division_rounding=True", True, 0, 0, 0),
                variant("use_fast_math=True", False, 29, 2, 1),
            ]
        )  # fmt: skip
    )
    assert found["removed_by"] == ["eager_numerics.division_rounding=True"]
    assert found["nearer_fp64"] == "eager nearer"
    assert "div.full.f32" in gpu_mechanisms.mechanism_text(found)


def test_no_switch_reads_unexplained_with_what_was_tried_and_absent_options_are_not_tried():
    found = gpu_mechanisms.case_finding(
        case(
            [
                variant("default", False, 5, 1, 0),
                variant("deterministic=True", False, 4, 1, 0),
                {"name": "numerics=strict_reduction", "status": "absent", "reason": "no such option"},
            ],
            eager=(2, 1),
        )  # fmt: skip
    )
    assert found["removed_by"] == [] and found["tried"] == ["deterministic=True"]
    assert found["absent"] == ["numerics=strict_reduction"]
    assert found["nearer_fp64"] == "compiled nearer"
    assert gpu_mechanisms.mechanism_text(found).startswith("unexplained")


def test_first_screen_counts_cases_not_variants():
    data = {"experiments": {"c3": {"cases": [
        case([variant("default", True, 0, 0, 0)]),
        case([variant("default", False, 3, 2, 1), variant("eager_numerics.disable_ftz=True", True, 0, 0, 0)]),
        case([variant("default", False, 3, 1, 1)], eager=(1, 1)),
    ]}}}  # fmt: skip
    line = gpu_mechanisms.first_screen_line(data)
    assert "2 of 3 cases differ from eager" in line
    assert "1 explained by a switch (eager_numerics.disable_ftz=True)" in line
    assert "1 by none tried" in line


def test_a_gpu_run_without_a_gpu_copy_has_no_copy_yardstick():
    host_copy = {"name": "MemoryCopy/bytes:1/threads:2/real_time", "bytes_per_second": 2e10}
    gpu_copy = {"name": "DeviceMemoryCopy/bytes:1/device:cuda/manual_time", "bytes_per_second": 4e12}
    gpu_run = {"context": {"fusebench_device": "torch:cuda"}, "benchmarks": [host_copy]}
    assert copy_bandwidth(gpu_run) is None
    assert copy_bandwidth({**gpu_run, "benchmarks": [host_copy, gpu_copy]}) == 4e12
    assert copy_bandwidth({"context": {"fusebench_device": "cpu"}, "benchmarks": [host_copy]}) == 2e10


def run(mode, seed, losses):
    return {"mode": mode, "seed": seed, "eval": [{"step": 50 * (i + 1), "loss": x} for i, x in enumerate(losses)]}


class Recorder:
    def __init__(self):
        self.verdicts, self.tables, self.paragraphs = [], [], []

    def verdict(self, statement, v):
        self.verdicts.append((v.claim, v))

    def paragraph(self, text):
        self.paragraphs.append(text)

    def table(self, header, rows, **kwargs):
        self.tables.append((header, rows))


def test_training_on_the_gpu_is_decided_by_the_prediction_interval():
    eager = [run("eager", 1, [3.0, 2.0]), run("eager", 2, [3.1, 2.1]), run("eager", 3, [3.05, 2.05])]
    inside = {"runs": [*eager, run("compiled", 1, [3.02, 2.04])], "dtype": "bf16"}
    outside = {"runs": [*eager, run("compiled", 1, [3.02, 2.9])], "dtype": "bf16"}
    for data, expected in ((inside, "SUPPORTED"), (outside, "CONTRADICTED")):
        s = Recorder()
        gpu_mechanisms.render_alignment(s, data)
        assert s.verdicts[0][1].outcome.name == expected
    rows = claims.e.gpu_band_row(outside)
    assert rows["rows"] == 2 and rows["excursions"] == 1


def test_training_with_one_eager_seed_is_not_judged():
    s = Recorder()
    gpu_mechanisms.render_alignment(s, {"runs": [run("eager", 1, [2.0]), run("compiled", 1, [2.5])]})
    assert s.verdicts[0][1].outcome.name == "NA"


def test_a_gpu_kernels_share_is_decided_by_its_rounds_against_the_gpus_own_copy():
    from reports.claims import engine

    rounds = {"copy_share": 0.8, "copy_share_lo": 0.75, "copy_share_hi": 0.84, "copy_share_rounds": 31,
              "copy_bytes_per_second": 3e12}  # fmt: skip
    fused = {"name": "Chain/path:fused/dtype:f16/n:1/device:cuda/manual_time", "bytes_per_second": 2.4e12}

    def target(benchmark):
        facts = engine.Facts(False, {"Chain": {"fused": benchmark}}, {}, None, {}, None, gpu=True)
        return engine.decide_target("Chain", facts)

    # no DeviceMemoryCopy in the run (a filter left it out): the rounds' own copy decides
    decided = target({**fused, **rounds})
    assert decided.outcome.name == "SUPPORTED" and decided.figures.rounds.median == 0.8
    below = target({**fused, **rounds, "copy_share": 0.55, "copy_share_lo": 0.5, "copy_share_hi": 0.6})
    assert below.outcome.name == "CONTRADICTED"
    # neither rounds nor a GPU copy: no yardstick, and the host's memcpy is not one
    assert target(fused).outcome.name == "NA"
