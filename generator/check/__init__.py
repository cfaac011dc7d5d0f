"""Check: the lint rules over resolved recipes and clusters, grouped by what they protect."""
