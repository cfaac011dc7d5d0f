"""Resolve: documents into typed recipes and clusters (extends, mods, defaults), each value with its origin."""
