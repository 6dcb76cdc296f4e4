"""The application layer: the ``gdpfed`` command line and the FastAPI planning service.

Imports ``planner`` and ``accounting``; adds HTTP, persistence and auth only.
"""
