"""The vocabulary: messages, units and rounds, folds, tokens, render and errors.

Beside them only what they need: the log's records and order rules, entries,
the checks of folds and of arguments, events, and the late import of extras
(the ports use it, and only core is below them). Nothing here does I/O or
knows a store, a model, a thread or HTTP. Provider formats are
``contextfold.formats``; what to keep from a text (key sentences, must-keep
items) is ``contextfold.extract``.
"""
