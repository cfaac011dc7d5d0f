"""What several test modules share: no test module imports from another (issue 41)."""
