"""Readers for each data set's real format, and generators of small synthetic files in that format."""
