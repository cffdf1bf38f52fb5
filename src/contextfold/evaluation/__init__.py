"""``contextfold eval``: replay a user's own conversations through presets x budgets.

``inputs`` reads the conversations (OpenAI-format JSON or JSONL, with optional
questions; a ChatGPT export through ``chatgpt``), ``budgets`` parses ``5%`` /
``1200``, ``retention`` is the answer-recall measure, ``replay`` runs one
conversation (its model calls counted by ``metered``, its answers graded by
``judge``), ``results`` pools the figures, ``suggest`` picks a preset and
budget from them, and ``run`` is the one call behind the command. ``report``
and ``plots`` write ``--report DIR``; ``commands`` is the CLI skin over them.
"""
