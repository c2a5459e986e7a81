"""The mutating admission webhook: the scheduling gate on every pod of an opted-in LWS.

Why this exists: the gate must be on a pod from its birth (the scheduler ignores gated
pods, so a waiting group holds nothing), and only an admission webhook can put it there
at creation, on a cluster without MutatingAdmissionPolicy. Two webhooks, both selecting
only objects labelled ``lws-gatekeeper.io/pool``:

- ``leaderworkersets.lws-gatekeeper.io`` copies the LWS's opt-in label into its pod
  templates (pods do not inherit an LWS's labels), and removes it when the LWS drops it;
- ``pods.lws-gatekeeper.io`` adds the gate to every pod created with that label, except
  a pod of a group that already holds its admission (``pass_through``: the leader's
  table), which it makes as if its gate had been lifted at once.

Unrelated pods never reach the gatekeeper, so its outage cannot block them; opted-in
objects are refused while it is down (failurePolicy Fail), so none escapes the gate.
The decisions are pure (``gatekeeper.core.model.gating``,
``core.admission.pass_through``); ``server`` serves them over HTTPS,
``thread`` runs that server on an event loop of its own, and ``config`` builds the
MutatingWebhookConfiguration.
"""

from gatekeeper.webhook.config import LWS_PATH, PODS_PATH, mutating_webhook_configuration
from gatekeeper.webhook.server import make_app, start_webhook_server
from gatekeeper.webhook.thread import WebhookThread

__all__ = [
    "LWS_PATH",
    "PODS_PATH",
    "WebhookThread",
    "make_app",
    "mutating_webhook_configuration",
    "start_webhook_server",
]
