"""Certificates for TLS tests, made with ``trustme``: a CA, the broker's certificate (for
127.0.0.1 and localhost), client contexts and client certificate files."""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme

from bus.link.tls import client_context


class Pki:
    """A CA, the broker's certificate and key files, and client contexts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = trustme.CA()
        self.ca_file = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.cert, self.key = root / "broker.pem", root / "broker.key"
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        server.private_key_pem.write_to_path(str(self.key))

    def client(self, name: str | None = None, ca: trustme.CA | None = None) -> ssl.SSLContext:
        """A client context trusting our CA, with a certificate named ``name`` (signed by
        ``ca``, default ours) when given."""
        context = client_context(ca=str(self.ca_file), environ={})
        if name is not None:
            issued = (ca or self.ca).issue_cert(name, common_name=name)
            issued.configure_cert(context)
        return context

    def client_files(self, name: str) -> tuple[Path, Path]:
        """The certificate and key files of a client certificate named ``name`` (our CA)."""
        issued = self.ca.issue_cert(name, common_name=name)
        cert, key = self.root / f"{name}.pem", self.root / f"{name}.key"
        issued.cert_chain_pems[0].write_to_path(str(cert))
        issued.private_key_pem.write_to_path(str(key))
        return cert, key
