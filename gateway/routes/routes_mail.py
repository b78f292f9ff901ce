"""``POST /v1/mail/{office}/{mailbox}``: direct mail from HTTP to a mailbox (PROTOCOL.md 9.13).

The JSON body is the mail's content (PLD); ``?type=`` its type (CMD; MOP's ``type`` of a direct
message). The mail goes on the bus to ``office.mailbox`` (TGT), from this gateway's mailbox
``http``: a MOP post office's mailbox (the MOP listener delivers it, section 11.3) or a bus
client's (``client.mailbox(name)``). By default the mail expects a reply and the answer is it,
``200 {"header", "payload"}`` as ``POST /v1/request`` answers an ACK; a refusal is the error of
its RCD (404: no such post office or mailbox; 504: no reply in time). ``?expect=0`` sends it
without asking for a reply: ``202 {"to"}``. The caller needs ``office`` among its groups, as for
a request to a group.
"""

from __future__ import annotations

import re
from typing import Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bus.errors import DecodeError
from gateway.bridge import render_response
from gateway.routes.payload import parse_body
from gateway.routes.routes_request import parse_timeout, read_body
from gateway.state import gateway_of

__all__ = ["NAME", "mail_endpoint"]

#: What a post office or a mailbox in the URL may look like (MOP's names hold no dot).
NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_:-]{0,63}")
_YES: Final = ("1", "true", "yes")
_NO: Final = ("0", "false", "no")


async def mail_endpoint(request: Request) -> Response:
    """Handle ``POST /v1/mail/{office}/{mailbox}``."""
    gateway = gateway_of(request)
    office, mailbox = request.path_params["office"], request.path_params["mailbox"]
    for what, name in (("post office", office), ("mailbox", mailbox)):
        if not NAME.fullmatch(name):
            raise DecodeError(f"bad {what} name {name[:64]!r}: letters, digits, _ : -, no dot")
    query = request.query_params
    cmd = query.get("type") or None
    expect_text = query.get("expect", "1").lower()
    if expect_text not in _YES + _NO:
        raise DecodeError(f"expect must be 1 or 0, got {expect_text[:20]!r}")
    principal = gateway.admit(request)
    principal.check_group(office)
    timeout = gateway.settings.cap_timeout(parse_timeout(query.get("timeout")))
    payload = parse_body(await read_body(request, gateway.max_body(principal)), need_cmd=False)
    target = f"{office}.{mailbox}"
    expect = expect_text in _YES
    reply = await gateway.bridge.mail(target, payload, cmd, expect, timeout)
    if reply is None:
        return JSONResponse({"to": target}, status_code=202)
    return Response(render_response(reply), media_type="application/json")
