"""Neural-network layers (arriving with the corpus issue)."""
