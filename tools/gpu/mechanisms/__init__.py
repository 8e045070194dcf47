"""The parts of tools/gpu/inductor_mechanisms.py (the command), each importing only those above it:
records      JSON records: error records, JSON-safe copies, atomic writes
process      the run's budget, hard limits and progress lines
catalogue    what is measured: experiments, sizes, ops, seeded inputs, variants of Inductor's options
measures     ULP distances against the fp64 reference and between results, bit equality
evidence     what Inductor wrote: generated code, launch configurations, PTX and SASS counts
patches      in-process patches a variant applies (Triton's FMA contraction, fusebench's copy)
findings     sentences computed from the recorded numbers
runner       one case: inputs, eager, the reference, each variant compiled, run and compared
experiments  the five experiments (c3, fma, c1, c2, strict) as cases for the runner
header       the machine, the versions, Inductor's options and Triton's knobs
printing     the table printed at the end
"""
