"""``contextfold eval``: replay a user's own conversations through presets x budgets.

``inputs`` reads the conversations (OpenAI-format JSON or JSONL, with optional
questions), ``budgets`` parses ``5%`` / ``1200``, ``retention`` is the
answer-recall measure, ``replay`` runs one conversation and ``results`` pools
the figures; ``commands`` is the CLI skin over them.
"""
