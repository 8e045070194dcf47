"""The report's sections, one module per task of the plan (a, b, c1, c2, c3, d, e, s, engine) and the
attribution of counter-examples (attribution). Each render(section, result) shows the verdicts its
claim family decided (reports/claims/) and writes the task's figures and tables; nothing here
decides a claim."""

from __future__ import annotations

from reports import claims
from reports.claims.verdict import Verdict
from reports.numbers import yesno
from reports.results import axes, benchmarks

DTYPES = ("f16", "bf16", "f32")
ENGINE_DEVICES = ("cpu", "cuda")  # fusebench's own engine: its kernels carry traces and objdump counts


def show(s, verdicts: list[Verdict]):
    """Each verdict in the section, in its claim's words (the matrix reads them from there)."""
    for v in verdicts:
        s.verdict(claims.statement(v), v)


def flag(value) -> str:
    """A 1 / 0 / -1 counter: yes, no, or — where the device has nothing to compare."""
    return "—" if value is None or value < 0 else yesno(value == 1)


def sass_rows(run: dict, prefix: str) -> list[tuple[dict, dict]]:
    """The CUDA device's SASS evidence: kernels compiled by NVRTC for named architectures and
    disassembled (cuobjdump), which needs the CUDA toolkit but no GPU."""
    return [(axes(run, b), b) for b in benchmarks(run, prefix) if not b.get("error_occurred")]
