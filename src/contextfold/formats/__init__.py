"""Provider formats: how contextfold's messages meet each provider's wire shape.

contextfold keeps OpenAI chat messages (``contextfold.core.messages``). A
format module converts them to and from another provider's request shape
(``anthropic``: ``to_anthropic``; ``anthropic_read``: ``from_anthropic``), and a
checks module finds what that provider would refuse before it is sent
(``openai_checks``, ``anthropic_checks``, both yielding ``fault.PromptFault``
and sharing ``fault.pairing_faults``). ``checks`` is the one entry point,
``prompt_faults(messages, provider)``, with a table of the providers it knows.

The OpenAI Responses API's requests and answers read and write through
``responses`` (``request_messages``, ``request_body``) and ``responses_answer``
(``output_message``, ``ResponseStream``), losslessly: what a message cannot
hold rides in its ``meta``. A new provider format is a converter module, a
checks module and one line in ``checks.CHECKS``. This layer sits above ``core`` and below the
ports: the model adapters (``llm/``) and the service's proxy use it, and it
knows no store, model or HTTP.
"""
