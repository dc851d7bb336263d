"""Reading results back: regressions against a baseline, plots. Everything reads through the warehouse."""
