"""Verifies Web Bot Auth signatures with an implementation courtesy does not use (PyPI's
http-message-signatures and cryptography), for tests/it/signing.rs.

Reads one JSON document on stdin:
  {"jwks": {"keys": [...]},                    # what `courtesy keys directory` printed
   "messages": [{"kind": "request" | "directory" | "card",
                 "method": "GET", "url": "http://host:port/path",
                 "headers": [[name, value], ...],           # as they arrived
                 "request_headers": [[name, value], ...],   # directory: the request's
                 "body": "...",                             # directory, card: the body
                 "at": 1733450000.25,                       # unix seconds when it arrived
                 "tag": "...", "required": [...]}]}         # request: another signature's
and prints one JSON line per message: {"ok": true, ...what was verified} or
{"ok": false, "error": "..."}. A signature is valid only if it verifies against a key of the
JWKS whose RFC 7638 thumbprint is its keyid, and `created <= at <= expires` at its arrival.
"""

import base64
import hashlib
import json
import sys
import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from http_message_signatures import HTTPMessageVerifier, InvalidSignature, algorithms
from http_message_signatures.resolvers import HTTPSignatureKeyResolver


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def thumbprint(jwk):
    canonical = json.dumps({"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"]},
                           separators=(",", ":"), sort_keys=True)
    digest = hashlib.sha256(canonical.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class JwksResolver(HTTPSignatureKeyResolver):
    """The public keys of a JWKS, each under its thumbprint."""

    def __init__(self, jwks):
        self.keys = {}
        for jwk in jwks["keys"]:
            assert jwk["kty"] == "OKP" and jwk["crv"] == "Ed25519", jwk
            assert "d" not in jwk, "a private key in the directory"
            self.keys[thumbprint(jwk)] = Ed25519PublicKey.from_public_bytes(b64url_decode(jwk["x"]))

    def resolve_public_key(self, key_id):
        return self.keys.get(key_id)


class Headers:
    """Field lines in arrival order, as the library reads them."""

    def __init__(self, pairs):
        self.pairs = [(name, value) for name, value in pairs]

    def items(self):
        return list(self.pairs)

    def get(self, name):
        values = [v for n, v in self.pairs if n.lower() == name.lower()]
        return ", ".join(values) if values else None


class Request:
    def __init__(self, method, url, headers):
        self.method, self.url, self.headers = method, url, Headers(headers)


class Response:
    def __init__(self, status, headers, request):
        self.status_code, self.headers, self.request = status, Headers(headers), request


def verify(verifier, message, tag, required):
    """Every signature with `tag` verified; the window is checked below, at arrival."""
    results = verifier.verify(message, max_age=None, expect_tag=tag, require_components=required)
    return results


def main():
    doc = json.load(sys.stdin)
    verifier = HTTPMessageVerifier(signature_algorithm=algorithms.ED25519,
                                   key_resolver=JwksResolver(doc["jwks"]))
    # The window is judged at each message's arrival below, strictly: the library's own check
    # (against the time this script runs) is widened out of the way.
    verifier.max_clock_skew = datetime.timedelta(days=1)
    for m in doc["messages"]:
        try:
            request = Request(m["method"], m["url"], m.get("request_headers", m["headers"]))
            if m["kind"] in ("directory", "card"):
                message = Response(200, m["headers"], request)
                tag = {"directory": "http-message-signatures-directory",
                       "card": "signature-agent-card"}[m["kind"]]
                results = verify(verifier, message, tag, ['"@authority";req', '"content-digest"'])
                if "body" in m:
                    # The signatures cover Content-Digest; the digest must be the body's.
                    digest = base64.b64encode(hashlib.sha256(m["body"].encode()).digest()).decode()
                    if message.headers.get("content-digest") != f"sha-256=:{digest}:":
                        raise InvalidSignature("Content-Digest is not the body's SHA-256")
            else:
                # A client's own signature beside courtesy's: its tag and components are named.
                message = request
                results = verify(verifier, message, m.get("tag", "web-bot-auth"),
                                 m.get("required", ['"@authority"', '"signature-agent";key="sig1"']))
            seen = []
            for r in results:
                created, expires = r.parameters.get("created"), r.parameters.get("expires")
                if created is None or expires is None:
                    raise InvalidSignature("created and expires are required")
                if not created - 1 <= m["at"] <= expires + 0.999:
                    raise InvalidSignature(
                        f"arrived at {m['at']:.3f} outside created={created} expires={expires}")
                seen.append({
                    "keyid": r.parameters["keyid"],
                    "alg": r.parameters.get("alg"),
                    "tag": r.parameters.get("tag"),
                    "nonce": r.nonce,
                    "created": created,
                    "expires": expires,
                    "components": [c for c in r.covered_components if c != '"@signature-params"'],
                })
            print(json.dumps({"ok": True, "signatures": seen, "agent": message.headers.get("signature-agent")}))
        except Exception as e:  # every failure is a verdict, named
            print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))


if __name__ == "__main__":
    main()
