"""A team's history: is a difference real (compare), since when (changepoints), what else changed
then (circumstances), across every run any machine stored (the files, or the database index of
store/database.py). Records in, numbers out; the report draws them. Imports no Paddle.
"""
