"""Read: TOML files into documents with positions, checked against the JSON Schemas."""
