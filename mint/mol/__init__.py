"""The mixture runtime: base loaded once, specialists attached as named adapters, one per turn."""
