"""Training code for the bundled models (moving out to the training package)."""
