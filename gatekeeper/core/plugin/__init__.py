"""The pure half of the plug-in contract: what a backend or check is to the program.

``backend`` (the ``Backend`` type and the ``Registry`` the CLI, render, the webhook and
``why`` iterate) and ``explain`` (what ``lws-gatekeeper why`` says, read through a
``Reader`` that the command implements, so no client lives here).
"""
