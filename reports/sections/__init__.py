"""One module per plan task; each exposes render(doc, runs)."""
