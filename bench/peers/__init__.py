"""Peer programs that run under another interpreter (a peer whose dependencies cannot share gdpfed's
environment); each prints its rows as JSON lines and imports nothing from gdpfed."""
