/*
 * The gateway's request lane, part of the bus.native._hotpath accelerator.
 *
 * One plain HTTP/1.1 request read whole: the
 * gateway's ``POST /v1/request/{group}`` as the usual client sends it (docs/PROTOCOL.md 9.2;
 * gateway/process/http_protocol.py uses it, and uvicorn's httptools parser stays the reference).
 *
 * http_request(data) reads a read's bytes when they are exactly one request it can vouch for:
 * ``POST``, an origin-form target of plain characters (no query, no escape), ``HTTP/1.1``,
 * header lines of token names and visible-ASCII values, one Content-Length, and the whole body.
 * It answers what uvicorn's callbacks would have collected: the target, the header list (names
 * in lower case, in order), the body and whether the connection stays open. Anything else
 * (another method or version, a query, obs-fold, a byte outside ASCII, Transfer-Encoding,
 * Upgrade, Expect, a second Content-Length, a Connection other than keep-alive or close, a
 * partial request, a second request behind the first, data that is not bytes) is None: the
 * caller feeds the bytes to the reference parser, which answers them or says what is wrong.
 *
 * And json_request(...): the bus request (ENC=JSON) around a gateway's JSON body, the bytes
 * and routing header bus/message/jsonwire.py compose_request writes (docs/PROTOCOL.md 9.2,
 * 5.11), or None when anything needs that reference (a CMD or a name to escape).
 */
#include "_hotpath.h"
#include <string.h>

/* More header lines than this: the reference parser's business. */
#define MAX_LINES 64
/* A Content-Length of more digits than this: the reference parser's business. */
#define MAX_LENGTH_DIGITS 9

/* RFC 9110 5.6.2 tchar. */
static int
is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* RFC 3986 pchar and '/', without pct-encoded: unreserved, sub-delims, ':' and '@'. */
static int
is_path_char(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
    return c != 0 && strchr("/-._~!$&'()*+,;=:@", c) != NULL;
}

static int
same_lower(const unsigned char *p, Py_ssize_t n, const char *lower)
{
    Py_ssize_t k = 0;
    for (; k < n && lower[k]; k++) {
        unsigned char c = p[k];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
        if (c != (unsigned char)lower[k]) return 0;
    }
    return k == n && lower[k] == 0;
}

PyObject *
http_request(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyBytes_Check(arg)) Py_RETURN_NONE;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    const unsigned char *end = buf + n;
    if (n < 16 || memcmp(buf, "POST /", 6) != 0) Py_RETURN_NONE;
    const unsigned char *url = buf + 5, *p = url;
    while (p < end && is_path_char(*p)) p++;
    const unsigned char *url_end = p;
    if (end - p < 11 || memcmp(p, " HTTP/1.1\r\n", 11) != 0) Py_RETURN_NONE;
    p += 11;

    /* The header lines: each span found first, the Python objects made once all is known. */
    const unsigned char *names[MAX_LINES], *values[MAX_LINES];
    Py_ssize_t name_n[MAX_LINES], value_n[MAX_LINES];
    int lines = 0, keep_alive = 1, length_seen = 0;
    long long length = 0;
    for (;;) {
        if (end - p < 2) Py_RETURN_NONE;
        if (p[0] == '\r') {
            if (p[1] != '\n') Py_RETURN_NONE;
            p += 2;
            break;
        }
        if (lines == MAX_LINES) Py_RETURN_NONE;
        const unsigned char *name = p;
        while (p < end && is_tchar(*p)) p++;
        if (p == name || p == end || *p != ':') Py_RETURN_NONE;
        Py_ssize_t nn = p - name;
        p++;
        while (p < end && (*p == ' ' || *p == '\t')) p++;
        const unsigned char *value = p;
        while (p < end && ((*p >= 0x21 && *p <= 0x7e) || *p == ' ' || *p == '\t')) p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') Py_RETURN_NONE;
        Py_ssize_t vn = p - value;
        if (vn > 0 && (value[vn - 1] == ' ' || value[vn - 1] == '\t')) Py_RETURN_NONE;
        p += 2;
        if (same_lower(name, nn, "content-length")) {
            if (length_seen || vn == 0 || vn > MAX_LENGTH_DIGITS) Py_RETURN_NONE;
            for (Py_ssize_t k = 0; k < vn; k++) {
                if (value[k] < '0' || value[k] > '9') Py_RETURN_NONE;
                length = length * 10 + (value[k] - '0');
            }
            length_seen = 1;
        } else if (same_lower(name, nn, "connection")) {
            if (same_lower(value, vn, "keep-alive")) keep_alive = 1;
            else if (same_lower(value, vn, "close")) keep_alive = 0;
            else Py_RETURN_NONE;
        } else if (same_lower(name, nn, "transfer-encoding") || same_lower(name, nn, "upgrade")
                   || same_lower(name, nn, "expect")) {
            Py_RETURN_NONE;
        }
        names[lines] = name;
        name_n[lines] = nn;
        values[lines] = value;
        value_n[lines] = vn;
        lines++;
    }
    if (!length_seen || end - p != length) Py_RETURN_NONE;

    PyObject *headers = PyList_New(lines);
    if (headers == NULL) return NULL;
    for (int k = 0; k < lines; k++) {
        PyObject *name = PyBytes_FromStringAndSize(NULL, name_n[k]);
        if (name == NULL) goto fail;
        unsigned char *lower = (unsigned char *)PyBytes_AS_STRING(name);
        for (Py_ssize_t j = 0; j < name_n[k]; j++) {
            unsigned char c = names[k][j];
            lower[j] = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
        }
        PyObject *value = PyBytes_FromStringAndSize((const char *)values[k], value_n[k]);
        if (value == NULL) {
            Py_DECREF(name);
            goto fail;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(name);
            Py_DECREF(value);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, name);
        PyTuple_SET_ITEM(pair, 1, value);
        PyList_SET_ITEM(headers, k, pair);
    }
    PyObject *target = PyBytes_FromStringAndSize((const char *)url, url_end - url);
    if (target == NULL) goto fail;
    PyObject *body = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)length);
    if (body == NULL) {
        Py_DECREF(target);
        goto fail;
    }
    return Py_BuildValue("(NNNO)", target, headers, body, keep_alive ? Py_True : Py_False);
fail:
    Py_DECREF(headers);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* A gateway's request on the bus (bus/message/jsonwire.py compose_request)                  */

/* Text orjson writes as it is between quotes: ASCII, no quote, backslash or control. */
static int
plain_text(PyObject *text, const char **out, Py_ssize_t *n)
{
    if (!PyUnicode_Check(text) || !PyUnicode_IS_ASCII(text)) return 0;
    const char *p = (const char *)PyUnicode_1BYTE_DATA(text);
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    for (Py_ssize_t k = 0; k < len; k++) {
        unsigned char c = (unsigned char)p[k];
        if (c < 0x20 || c == '"' || c == '\\') return 0;
    }
    *out = p;
    *n = len;
    return 1;
}

/* The length of a string literal. */
#define LIT(text) ((Py_ssize_t)(sizeof(text) - 1))

typedef struct {
    char *at;
} Writer;

static void
put(Writer *w, const char *src, Py_ssize_t n)
{
    memcpy(w->at, src, (size_t)n);
    w->at += n;
}

static void
put_member(Writer *w, const char *name, const char *value, Py_ssize_t n)
{
    put(w, name, (Py_ssize_t)strlen(name));
    put(w, value, n);
    put(w, "\"", 1);
}

/* json_request(payload, group, reply_to, src, caller, trace, max_depth, max_fields, block,
 * pos) -> (body, header) | None. */
PyObject *
json_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 10 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "json_request(payload, group, reply_to, src, caller, "
                                         "trace, max_depth, max_fields, block, pos)");
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    int max_depth = (int)PyLong_AsLong(args[6]);
    Py_ssize_t max_fields = PyLong_AsSsize_t(args[7]);
    Py_ssize_t pos = PyLong_AsSsize_t(args[9]);
    if (PyErr_Occurred()) return NULL;
    if (pos < 0 || pos > PyBytes_GET_SIZE(args[8]) - 16) {
        PyErr_SetString(PyExc_ValueError, "json_request: fewer than 16 bytes at pos");
        return NULL;
    }
    /* The names: each plain text, or None where the reference leaves the field out. */
    const char *text[5] = {NULL, NULL, NULL, NULL, NULL};
    Py_ssize_t size[5] = {0, 0, 0, 0, 0};
    for (int k = 0; k < 5; k++) {
        PyObject *value = args[1 + k];
        if (value == Py_None && k > 0) continue;
        if (!plain_text(value, &text[k], &size[k])) Py_RETURN_NONE;
    }
    /* ASCII, the CMD member first (jsonwire._CMD_FIRST), read as peek_json reads it. */
    for (Py_ssize_t k = 0; k < n; k++) {
        if (buf[k] >= 0x80) Py_RETURN_NONE;
    }
    Py_ssize_t k = 0;
    while (k < n && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\n' || buf[k] == '\r')) k++;
    if (k == n || buf[k] != '{') Py_RETURN_NONE;
    k++;
    while (k < n && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\n' || buf[k] == '\r')) k++;
    if (n - k < 5 || memcmp(buf + k, "\"CMD\"", 5) != 0) Py_RETURN_NONE;
    k += 5;
    while (k < n && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\n' || buf[k] == '\r')) k++;
    if (k == n || buf[k] != ':') Py_RETURN_NONE;
    Header h;
    int enc, quirks;
    Py_ssize_t left;
    if (!read_head(buf, n, max_depth, max_fields, 1, &h, &enc, &quirks, &left) || quirks)
        Py_RETURN_NONE;
    Py_ssize_t cmd_at = h.start[H_CMD], cmd_n = h.stop[H_CMD] - h.start[H_CMD];
    if (cmd_at < 0 || cmd_n <= 0 || memchr(buf + cmd_at, '\\', (size_t)cmd_n) != NULL)
        Py_RETURN_NONE;
    /* The body, stripped as bytes.strip(b" \t\n\r") strips it. */
    Py_ssize_t first = 0, last = n;
    while (first < last && (buf[first] == ' ' || buf[first] == '\t' || buf[first] == '\n'
                            || buf[first] == '\r')) first++;
    while (last > first && (buf[last - 1] == ' ' || buf[last - 1] == '\t'
                            || buf[last - 1] == '\n' || buf[last - 1] == '\r')) last--;

    /* {"MID":"..","GRP":"..",["RPY":"..",]"TYP":"RQS","CMD":"..","ENC":"JSON",[SRC][CLR][TRC]
     * ,"PLD":body} as orjson writes the fields (compose_request's order). */
    static const char *names[5] = {",\"GRP\":\"", ",\"RPY\":\"", ",\"SRC\":\"", ",\"CLR\":\"",
                                   ",\"TRC\":\""};
    Py_ssize_t total = LIT("{\"MID\":\"") + 36 + 1;
    for (int j = 0; j < 5; j++) {
        if (text[j] != NULL) total += (Py_ssize_t)strlen(names[j]) + size[j] + 1;
    }
    total += LIT(",\"TYP\":\"RQS\"") + LIT(",\"CMD\":\"") + cmd_n + 1
             + LIT(",\"ENC\":\"JSON\"") + LIT(",\"PLD\":") + (last - first) + 1;
    PyObject *body = PyBytes_FromStringAndSize(NULL, total);
    if (body == NULL) return NULL;
    PyObject *mid = PyUnicode_New(36, 127);
    if (mid == NULL) {
        Py_DECREF(body);
        return NULL;
    }
    format_uuid((const unsigned char *)PyBytes_AS_STRING(args[8]) + pos,
                PyUnicode_1BYTE_DATA(mid));
    Writer w = {PyBytes_AS_STRING(body)};
    put(&w, "{\"MID\":\"", LIT("{\"MID\":\""));
    put(&w, (const char *)PyUnicode_1BYTE_DATA(mid), 36);
    put(&w, "\"", 1);
    /* GRP, RPY: group and reply_to, in that order; then TYP CMD ENC; then SRC CLR TRC. */
    const int order_first[2] = {0, 1}, order_last[3] = {2, 3, 4};
    for (int j = 0; j < 2; j++) {
        int f = order_first[j];
        if (text[f] != NULL) put_member(&w, names[f], text[f], size[f]);
    }
    put(&w, ",\"TYP\":\"RQS\"", LIT(",\"TYP\":\"RQS\""));
    put(&w, ",\"CMD\":\"", LIT(",\"CMD\":\""));
    put(&w, (const char *)buf + cmd_at, cmd_n);
    put(&w, "\"", 1);
    put(&w, ",\"ENC\":\"JSON\"", LIT(",\"ENC\":\"JSON\""));
    for (int j = 0; j < 3; j++) {
        int f = order_last[j];
        if (text[f] != NULL) put_member(&w, names[f], text[f], size[f]);
    }
    put(&w, ",\"PLD\":", LIT(",\"PLD\":"));
    Py_ssize_t start = w.at - PyBytes_AS_STRING(body);
    put(&w, (const char *)buf + first, last - first);
    put(&w, "}", 1);
    if (w.at - PyBytes_AS_STRING(body) != total) {
        Py_DECREF(body);
        Py_DECREF(mid);
        PyErr_SetString(PyExc_SystemError, "json_request: the body's size was miscounted");
        return NULL;
    }
    PyObject *cmd = PyUnicode_DecodeLatin1((const char *)buf + cmd_at, cmd_n, NULL);
    if (cmd == NULL) {
        Py_DECREF(body);
        Py_DECREF(mid);
        return NULL;
    }
    /* Header(1, "RQS", group, None, reply_to, mid, None, src, cmd, "JSON", None, None, None,
     * start, end, fields, False, -1, caller, trace, None, None) */
    PyObject *head = Py_BuildValue(
        "(isOOONOOOsOOOnnnOiOOOO)", 1, "RQS", args[1], Py_None, args[2], mid, Py_None, args[3],
        cmd, "JSON", Py_None, Py_None, Py_None, start, start + (last - first), max_fields - left,
        Py_False, -1, args[4], args[5], Py_None, Py_None);
    Py_DECREF(cmd);
    if (head == NULL) {
        Py_DECREF(body);
        return NULL;
    }
    return Py_BuildValue("(NN)", body, head);
}

/* ---------------------------------------------------------------------------------------- */
/* A gateway's answer: the bus ACK as the HTTP response (gateway/routes/request_direct.py)     */

/* The answer of a JSON ACK still on the wire: ``{"header": <its fields but PLD and an inbox
 * GRP>, "payload": <its PLD>}`` (gateway.bridge.render_response, bus.message.jsonwire
 * json_parts) after the status line, the server's default lines, content-length, content-type,
 * x-busgate-mid, traceparent and ``close`` (gateway.routes.request_answers._ANSWER_LINES); None
 * when anything needs the reference (a quirk, a byte outside ASCII, the PLD not where it is
 * cut from, an inbox GRP not found as written, a header not read from these bytes by peek). */
PyObject *
http_answer(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7 || !PyBytes_Check(args[0]) || !PyTuple_Check(args[1])
        || PyTuple_GET_SIZE(args[1]) < 18) {
        PyErr_SetString(PyExc_TypeError,
                        "http_answer(raw, head, status, defaults, mid, trace, close)");
        return NULL;
    }
    for (int k = 2; k < 7; k++) {
        if (!PyBytes_Check(args[k])) {
            PyErr_SetString(PyExc_TypeError, "http_answer: status, defaults, mid, trace and "
                                             "close are bytes");
            return NULL;
        }
    }
    const unsigned char *raw = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    PyObject *head = args[1];
    PyObject *enc = PyTuple_GET_ITEM(head, 0), *grp = PyTuple_GET_ITEM(head, 2);
    PyObject *enc_field = PyTuple_GET_ITEM(head, 9), *quirks = PyTuple_GET_ITEM(head, 16);
    if (!PyLong_Check(enc) || PyLong_AsLong(enc) != 1 || quirks != Py_False
        || !PyUnicode_Check(enc_field) || !PyUnicode_IS_ASCII(enc_field)
        || PyUnicode_GET_LENGTH(enc_field) != 4
        || memcmp(PyUnicode_1BYTE_DATA(enc_field), "JSON", 4) != 0)
        Py_RETURN_NONE;
    Py_ssize_t start = PyLong_AsSsize_t(PyTuple_GET_ITEM(head, 13));
    Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(head, 14));
    Py_ssize_t fields = PyLong_AsSsize_t(PyTuple_GET_ITEM(head, 17));
    if (PyErr_Occurred()) return NULL;
    if (fields < 0) Py_RETURN_NONE;  /* not read from these bytes (header_of): no PLD bounds */
    for (Py_ssize_t k = 0; k < n; k++) {
        if (raw[k] >= 0x80) Py_RETURN_NONE;  /* Latin-1 to UTF-8: the reference */
    }
    /* The header's pieces (at most two spans of raw, then "}") and the payload. */
    const unsigned char *pieces[4];
    Py_ssize_t sizes[4];
    int count;
    const unsigned char *payload;
    Py_ssize_t payload_n;
    if (start < 0) {
        pieces[0] = raw;
        sizes[0] = n;
        count = 1;
        payload = (const unsigned char *)"{}";
        payload_n = 2;
    } else {
        Py_ssize_t cut = start - 7;
        if (cut < 0 || end > n || end < start || memcmp(raw + cut, ",\"PLD\":", 7) != 0)
            Py_RETURN_NONE;
        pieces[0] = raw;
        sizes[0] = cut;
        if (end == n - 1) {
            pieces[1] = (const unsigned char *)"}";
            sizes[1] = 1;
        } else if (end < n && raw[end] == ',') {
            pieces[1] = raw + end;
            sizes[1] = n - end;
        } else {
            Py_RETURN_NONE;
        }
        count = 2;
        payload = raw + start;
        payload_n = end - start;
    }
    /* Without its "GRP":"_INBOX..." member (gateway.bridge._without_inbox): found in the first
     * piece, as header.find finds it (the GRP comes before PLD). */
    if (grp != Py_None) {
        if (!PyUnicode_Check(grp) || !PyUnicode_IS_ASCII(grp)) Py_RETURN_NONE;
        const char *g = (const char *)PyUnicode_1BYTE_DATA(grp);
        Py_ssize_t gn = PyUnicode_GET_LENGTH(grp);
        if (gn >= 7 && memcmp(g, "_INBOX.", 7) == 0) {
            Py_ssize_t member_n = 7 + gn + 1;  /* "GRP":" grp " */
            const unsigned char *at = NULL;
            for (Py_ssize_t k = 0; k + member_n <= sizes[0]; k++) {
                if (pieces[0][k] == '"' && memcmp(pieces[0] + k, "\"GRP\":\"", 7) == 0
                    && memcmp(pieces[0] + k + 7, g, (size_t)gn) == 0
                    && pieces[0][k + 7 + gn] == '"') {
                    at = pieces[0] + k;
                    break;
                }
            }
            if (at == NULL) Py_RETURN_NONE;  /* (maybe after PLD: the reference looks) */
            /* As _without_inbox cuts it from the whole header: a comma after the member goes
             * with it, else one before it, else the member alone. */
            const unsigned char *first = pieces[0], *second = count == 2 ? pieces[1] : NULL;
            Py_ssize_t first_n = sizes[0], second_n = count == 2 ? sizes[1] : 0;
            Py_ssize_t before = at - first, after = before + member_n;
            int comma_after = after < first_n ? first[after] == ','
                                              : (second_n > 0 && second[0] == ',');
            count = 0;
            if (comma_after) {
                pieces[count] = first, sizes[count++] = before;
                if (after < first_n) {
                    pieces[count] = first + after + 1, sizes[count++] = first_n - after - 1;
                    if (second != NULL) pieces[count] = second, sizes[count++] = second_n;
                } else {
                    pieces[count] = second + 1, sizes[count++] = second_n - 1;
                }
            } else {
                Py_ssize_t keep = (before > 0 && first[before - 1] == ',') ? before - 1 : before;
                pieces[count] = first, sizes[count++] = keep;
                pieces[count] = first + after, sizes[count++] = first_n - after;
                if (second != NULL) pieces[count] = second, sizes[count++] = second_n;
            }
        }
    }
    Py_ssize_t header_n = 0;
    for (int k = 0; k < count; k++) header_n += sizes[k];
    Py_ssize_t body_n = LIT("{\"header\":") + header_n + LIT(",\"payload\":") + payload_n + 1;
    char length[24];
    int length_n = snprintf(length, sizeof length, "%zd", body_n);
    Py_ssize_t total = PyBytes_GET_SIZE(args[2]) + PyBytes_GET_SIZE(args[3])
                       + LIT("content-length: ") + length_n
                       + LIT("\r\ncontent-type: application/json\r\nx-busgate-mid: ")
                       + PyBytes_GET_SIZE(args[4]) + LIT("\r\ntraceparent: ")
                       + PyBytes_GET_SIZE(args[5]) + LIT("\r\n") + PyBytes_GET_SIZE(args[6])
                       + LIT("\r\n") + body_n;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    Writer w = {PyBytes_AS_STRING(out)};
    put(&w, PyBytes_AS_STRING(args[2]), PyBytes_GET_SIZE(args[2]));
    put(&w, PyBytes_AS_STRING(args[3]), PyBytes_GET_SIZE(args[3]));
    put(&w, "content-length: ", LIT("content-length: "));
    put(&w, length, length_n);
    put(&w, "\r\ncontent-type: application/json\r\nx-busgate-mid: ",
        LIT("\r\ncontent-type: application/json\r\nx-busgate-mid: "));
    put(&w, PyBytes_AS_STRING(args[4]), PyBytes_GET_SIZE(args[4]));
    put(&w, "\r\ntraceparent: ", LIT("\r\ntraceparent: "));
    put(&w, PyBytes_AS_STRING(args[5]), PyBytes_GET_SIZE(args[5]));
    put(&w, "\r\n", 2);
    put(&w, PyBytes_AS_STRING(args[6]), PyBytes_GET_SIZE(args[6]));
    put(&w, "\r\n", 2);
    put(&w, "{\"header\":", LIT("{\"header\":"));
    for (int k = 0; k < count; k++) put(&w, (const char *)pieces[k], sizes[k]);
    put(&w, ",\"payload\":", LIT(",\"payload\":"));
    put(&w, (const char *)payload, payload_n);
    put(&w, "}", 1);
    if (w.at - PyBytes_AS_STRING(out) != total) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "http_answer: the answer's size was miscounted");
        return NULL;
    }
    return out;
}
