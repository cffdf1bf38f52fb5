"""What to keep from a text when it must get shorter: key sentences and must-keep items.

``artifacts`` finds the items a summary may not lose (paths, URLs, numbers,
error lines, a user's constraints); ``candidates`` reads a conversation into
scored sentences and ``salience`` chooses among them by new information per
token. ``ExtractiveSummary`` (``strategies.extractive``) folds with them, the
checked and token-budget strategies pin missing items with them, and the
offline stand-in model (``llm.offline``) answers with the same choice. The
offline model is a port and a port may not import a strategy, so this layer
sits below both: above ``core``, beside ``formats``, knowing neither.
"""
