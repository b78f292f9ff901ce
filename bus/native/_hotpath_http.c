/*
 * One plain HTTP/1.1 request read whole, part of the bus.native._hotpath accelerator: the
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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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
