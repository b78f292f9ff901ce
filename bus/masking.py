"""Secrets kept out of what busgate shows: the password of a URL, masked as ``***``.

Every URL that busgate prints, logs, puts in an error or answers over HTTP (``/readyz``) goes
through :func:`mask_url` first, so ``bus://gateway:s3cret@host:4000`` is shown as
``bus://gateway:***@host:4000``: the post office stays readable, its secret does not
(PROTOCOL.md 4.8, "Secrets in URLs"). The password is what the URL parsers take it to
be (:func:`urllib.parse.urlsplit`: between the first ``:`` and the last ``@`` of the network
location), for each server of a ``nats://`` list. Sans-I/O: strings in, strings out.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MASK", "mask_url", "mask_urls_in"]

#: What a password is replaced with (SQLAlchemy's and Celery's choice).
MASK: Final = "***"

# A URL inside free text: a scheme, then everything up to white space or a quote.
_URL_IN_TEXT: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")


def mask_url(url: str) -> str:
    """``url`` with the password of each of its servers replaced by :data:`MASK`.

    A ``nats://`` URL may list several servers, comma-separated (``nats://u:p@a:4222,b:4222``):
    each is masked as its parser reads it. Anything else is one URL. A URL without a password
    comes back unchanged.
    """
    if "@" not in url:  # the usual case, and the cheap one: nothing to mask
        return url
    if url.lstrip().lower().startswith("nats://"):
        return ",".join(_mask_one(part) for part in url.split(","))
    return _mask_one(url)


def mask_urls_in(text: str) -> str:
    """``text`` (a message, an exception's words) with every URL in it masked."""
    if "@" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda match: mask_url(match.group(0)), text)


def _mask_one(url: str) -> str:
    scheme_end = url.find("://")
    start = scheme_end + 3 if scheme_end >= 0 else 0
    end = len(url)
    for stop in "/?#":  # the network location ends at the first of these (urlsplit's rule)
        index = url.find(stop, start)
        if index >= 0:
            end = min(end, index)
    at = url.rfind("@", start, end)
    if at < 0:
        return url
    colon = url.find(":", start, at)
    if colon < 0:  # a user without a password: nothing secret
        return url
    return f"{url[: colon + 1]}{MASK}{url[at:]}"
