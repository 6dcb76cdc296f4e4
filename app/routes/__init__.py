"""HTTP routes: thin functions that validate, call ``app.services``, and respond."""
