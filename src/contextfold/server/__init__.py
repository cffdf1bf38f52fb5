"""The service: ``contextfold serve``, a FastAPI app over the library (``pip install 'contextfold[server]'``).

``create_app(settings)`` (``server.app``) builds the app; the routers by resource
(``sessions``, ``views``, ``proxy``, ``page``) reach the library through one
``Service`` (``server.service``) and the caller's tenant (``server.auth``), both
FastAPI dependencies, and library errors become JSON in one place
(``server.errors``).
"""
