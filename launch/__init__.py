"""Command-line entry points: ``python launch/<name>.py --help``."""
