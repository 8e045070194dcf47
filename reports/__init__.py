"""fusebench report: results directory -> report.md / report.html (python -m reports.report). The
results are read by reports.results, the claims judged by reports.claims (which tools.gate reads
too), rendered by reports.sections and reports.matrix, written by reports.document."""
