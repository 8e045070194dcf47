"""fusebench report: results directory -> report.md / report.html (python -m reports.report); the claims it
judges are defined in reports.claims, which tools.gate reads too."""
