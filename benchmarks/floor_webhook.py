"""A mutating webhook that answers every review at once and changes nothing: the floor.

Why this exists: every pod of an opted-in LWS waits at its creation for the gatekeeper's
webhook. ``bench_scale.py --floor`` runs the scale-up once more with this server in the
gatekeeper's place (the LWS not opted in, every pod of its namespace sent here instead), so
the cost of a webhook round trip itself on this machine (the API server's call, TLS, the
same aiohttp server, no decision, no other thread) is measured beside the gatekeeper's.

Usage: python benchmarks/floor_webhook.py PORT CERT KEY   (serves /mutate until killed)
"""

from __future__ import annotations

import json
import ssl
import sys

from aiohttp import web


async def mutate(request: web.Request) -> web.Response:
    review = json.loads(await request.read())
    uid = review.get("request", {}).get("uid", "")
    answer = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True},
    }
    return web.json_response(answer)


def main() -> None:
    port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    app = web.Application()
    app.router.add_post("/mutate", mutate)
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=tls, print=None, access_log=None)


if __name__ == "__main__":
    main()
