"""History of results over time: change points across stored runs."""
