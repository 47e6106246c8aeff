"""Evaluation and benchmark harness for groundkit (not shipped with the package).

Run the modules from the repository root, e.g. ``python -m evals.beir_run``.
"""
