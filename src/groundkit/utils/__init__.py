"""Small helpers shared across the pipeline."""
