"""``python -m gatekeeper``: the same program as ``lws-gatekeeper``."""

from gatekeeper.cli import main

main()
