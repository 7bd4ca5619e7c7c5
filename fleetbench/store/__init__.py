"""The results store, the one home of results: schema-1 records and the append-only JSONL files
(schema, results: all a rank imports of this room), the database index of those files (database:
SQLite or PostgreSQL through SQLAlchemy), which runs a reader reads (select: `--db URL --where
KEY=VALUE`) and the `fleetbench results` command (cli). Imports no Paddle.
"""
