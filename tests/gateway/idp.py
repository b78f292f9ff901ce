"""An identity provider for the tests: real RSA, EC and Ed25519 keys, and a JWKS over HTTP.

Keys are made here with ``cryptography``; tokens are signed with PyJWT, or over raw JSON text
(a NaN ``exp``) with ``cryptography`` directly. :class:`JwksServer` serves the current document
from a ``ThreadingHTTPServer`` on a free loopback port and counts the fetches.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

ISSUER = "https://idp.test"
AUDIENCE = "busgate"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SigningKey:
    """A private key, its ``kid`` and algorithm, and its public JWK."""

    kid: str
    alg: str
    private: Any

    @classmethod
    def rsa(cls, kid: str, alg: str = "RS256") -> SigningKey:
        return cls(kid, alg, rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def ec(cls, kid: str) -> SigningKey:
        return cls(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def ed25519(cls, kid: str) -> SigningKey:
        return cls(kid, "EdDSA", ed25519.Ed25519PrivateKey.generate())

    def jwk(self, *, with_alg: bool = True) -> dict[str, Any]:
        public = self.private.public_key()
        if self.alg.startswith(("RS", "PS")):
            data = RSAAlgorithm.to_jwk(public, as_dict=True)
        elif self.alg.startswith("ES"):
            data = ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            data = OKPAlgorithm.to_jwk(public, as_dict=True)
        data = {**data, "kid": self.kid, "use": "sig"}
        if with_alg:
            data["alg"] = self.alg
        return data

    def token(self, claims: dict[str, Any], **header: Any) -> str:
        """A token signed by this key (``kid`` in its header unless ``kid=None`` is given)."""
        headers = {"kid": self.kid, **header}
        if headers["kid"] is None:
            del headers["kid"]
        alg = headers.pop("alg", self.alg)
        return jwt.encode(claims, self.private, algorithm=alg, headers=headers)

    def raw_token(self, payload: str) -> str:
        """A token signed over exactly this payload text (RS256 or ES256 only)."""
        header = json.dumps({"alg": self.alg, "kid": self.kid, "typ": "JWT"})
        signing_input = f"{_b64(header.encode())}.{_b64(payload.encode())}".encode()
        if self.alg == "RS256":
            signature = self.private.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        else:  # ES256: the JWS form is r || s, 32 bytes each
            r, s = decode_dss_signature(self.private.sign(signing_input, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signing_input.decode()}.{_b64(signature)}"


def claims(**extra: Any) -> dict[str, Any]:
    """Claims the test gateways accept: the right audience and issuer, valid for a minute."""
    import time

    now = int(time.time())
    return {"sub": "ana", "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 60, **extra}


@dataclass
class JwksServer:
    """Serves ``{"keys": [...]}`` at ``/jwks.json``; :attr:`status` other than 200 fails it."""

    keys: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    fetches: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/jwks.json"

    def publish(self, *keys: SigningKey) -> None:
        """Serve these keys' JWKs from now on."""
        with self._lock:
            self.keys = [key.jwk() for key in keys]

    def start(self) -> JwksServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with owner._lock:
                    owner.fetches += 1
                    status = owner.status
                    body = json.dumps({"keys": owner.keys}).encode()
                if status != 200:
                    body = b'{"error": "unavailable"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
