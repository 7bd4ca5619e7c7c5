"""A team's history: is a difference real (compare), since when (changepoints), what else changed
then (circumstances), across every run any machine stored (store: a database index of the JSONL
files, SQLite or PostgreSQL). Records in, numbers out; the report draws them. Imports no Paddle.
"""
