"""The compiler under test."""
