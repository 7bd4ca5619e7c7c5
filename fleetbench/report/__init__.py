"""What the stored numbers say: tables, charts, sections (docs/architecture.md, the report room)."""

# Where `fleetbench report` and `history` write charts unless --images names a directory: not the
# checkout's tracked images/ (make demo asks for that with --images images); ./report, beside
# ./log, is in .gitignore as log/ is, so a report run in the checkout changes no tracked file.
# Here, not in output.py: history's parser needs it without importing matplotlib.
DEFAULT_DIR = "report"
