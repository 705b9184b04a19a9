"""The book's plumbing: results, provenance, the build's calibration, claims, plots, plans
and the Colab set-up. Imports `deepdive.core` and `deepdive.models` only, and neither torch
nor jax when imported."""
