"""Analysis layer: pure functions over the canonical tables."""
