"""``contextfold eval``: replay a user's own conversations through presets x budgets.

``inputs`` reads the conversations (OpenAI-format JSON or JSONL, with optional
questions; a ChatGPT export through ``chatgpt``), ``budgets`` parses ``5%`` /
``1200``, ``retention`` is the answer-recall measure, ``replay`` runs one
conversation (its model calls counted by ``metered``; ``judge`` holds the fixed
prompts of answers and grades), ``results`` pools the figures, ``suggest`` picks
a preset and budget from them, and ``run`` is the one call behind the command.
``probes`` makes questions from the folded part of any conversation, ``grading``
asks and grades questions and probes through ``asking`` (one call: timed to its
prompt, failures counted) into an audit list, ``ledger`` is ``--results`` (a run
that resumes), and ``scores`` reads the probe scores, costs and the judge's
agreement from the audit. ``report`` and ``plots`` write ``--report DIR``;
``commands`` is the CLI skin over them.
"""
