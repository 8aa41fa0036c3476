"""The self-improvement loop: recipes that chain ingest, experience, train, eval, promote and route."""
