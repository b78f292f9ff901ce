/*
 * A service's usual answer written straight to the wire, part of the bus.native._hotpath
 * accelerator (docs/PROTOCOL.md 2.3, the reply rule; 1.7, JSON bodies; seed 002, the frames).
 *
 * ack_frame writes the ACK of a JSON request (ENC=JSON) whose payload is plain data as one
 * Last frame: the bytes bus.message.jsonwire.ack_frame_reference gives (Message.reply's JSON
 * lane, bus.message.jsonwire.compose_reply, then bus.link.wire.encode_message), without a
 * field dict, a Header or a Message. It vouches only for the usual case (header texts of
 * printable ASCII without quote or backslash, an ASCII payload text, a body within one frame
 * and max_size) and returns None for anything else: the reference path writes that, and raises
 * what it raises.
 */
#include "_hotpath.h"

/* The longest body one Last frame carries (bus.link.wire.DEFAULT_MAX_FRAME). */
#define MAX_FRAME 16381

/* 1 for the bytes JSON writes in a text as they are: printable ASCII but quote and backslash. */
static unsigned char AS_IS[256];

static void
as_is_init(void)
{
    for (int c = 0x20; c < 0x7f; c++) AS_IS[c] = 1;
    AS_IS['"'] = AS_IS['\\'] = 0;
}

/* 1 when text is None (absent: *n = -1) or an exact str that JSON writes as it is (AS_IS); 0
 * otherwise. */
static int
plain_text(PyObject *text, const char **p, Py_ssize_t *n)
{
    if (text == Py_None) {
        *n = -1;
        return 1;
    }
    if (!PyUnicode_CheckExact(text) || !PyUnicode_IS_ASCII(text)) return 0;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    for (Py_ssize_t i = 0; i < size; i++) {
        if (!AS_IS[s[i]]) return 0;
    }
    *p = (const char *)s;
    *n = size;
    return 1;
}

/* Appends `"NAME":"value",` (the comma left for the next member, the last one replaced by
 * the closing brace). */
static char *
put_text(char *out, const char *name, const char *value, Py_ssize_t n)
{
    *out++ = '"';
    memcpy(out, name, 3);
    out += 3;
    memcpy(out, "\":\"", 3);
    out += 3;
    memcpy(out, value, (size_t)n);
    out += n;
    *out++ = '"';
    *out++ = ',';
    return out;
}

PyObject *
ack_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "ack_frame(dumps, rpy, rid, mid, payload, src, trc, max_depth, "
                        "max_fields, max_size)");
        return NULL;
    }
    PyObject *dumps = args[0];
    args += 1;  /* the rest as the reference takes them */
    if (!AS_IS['a']) as_is_init();
    const char *text[5] = {NULL};
    Py_ssize_t size[5];
    static const int order[5] = {0, 1, 2, 4, 5};  /* rpy rid mid src trc */
    for (int k = 0; k < 5; k++) {
        if (!plain_text(args[order[k]], &text[k], &size[k])) Py_RETURN_NONE;
    }
    if (size[2] < 0) Py_RETURN_NONE;  /* an ACK has a MID */
    long depth = PyLong_AsLong(args[6]);
    if (depth == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t max_fields = PyLong_AsSsize_t(args[7]);
    if (max_fields == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t max_size = PyLong_AsSsize_t(args[8]);
    if (max_size == -1 && PyErr_Occurred()) return NULL;
    PyObject *payload = args[3], *data = NULL;
    const char *pld = NULL;
    Py_ssize_t pld_n = -1;
    if (payload != Py_None) {
        if (!PyDict_CheckExact(payload)) Py_RETURN_NONE;
        /* The fields besides the payload's: GRP RID ENC MID TYP, SRC TRC, and PLD itself
         * (compose_reply's room). */
        Py_ssize_t left = max_fields - ((size[0] >= 0) + (size[1] >= 0) + 3) -
                          ((size[3] >= 0) + (size[4] >= 0)) - 1;
        if (depth > 500) depth = 500;
        int ok = plain_value(payload, (int)depth, &left);
        if (ok < 0) return NULL;
        if (!ok) Py_RETURN_NONE;
        data = PyObject_CallOneArg(dumps, payload);
        if (data == NULL) return NULL;
        if (!PyBytes_Check(data)) {
            Py_DECREF(data);
            Py_RETURN_NONE;
        }
        pld = PyBytes_AS_STRING(data);
        pld_n = PyBytes_GET_SIZE(data);
        uint64_t high = 0;  /* the bytes OR-ed together: ASCII when no high bit is set */
        Py_ssize_t i = 0;
        for (; i + 8 <= pld_n; i += 8) {
            uint64_t word;
            memcpy(&word, pld + i, 8);
            high |= word;
        }
        for (; i < pld_n; i++) high |= (unsigned char)pld[i];
        if (high & 0x8080808080808080ULL) {  /* Latin-1 text: the reference converts it */
            Py_DECREF(data);
            Py_RETURN_NONE;
        }
    }
    /* {"GRP":"..","RID":"..","ENC":"JSON","MID":"..","TYP":"ACK","PLD":..,"SRC":"..","TRC":".."} */
    Py_ssize_t body = 2 + (9 + 4) + (9 + 3);  /* braces, "ENC":"JSON", and "TYP":"ACK", */
    for (int k = 0; k < 5; k++) {
        if (size[k] >= 0) body += 9 + size[k];  /* "NAM":"value", */
    }
    if (pld_n >= 0) body += 7 + pld_n;  /* "PLD":value, */
    body -= 1;  /* no comma after the last member */
    if (body > MAX_FRAME || body > max_size) {
        Py_XDECREF(data);
        Py_RETURN_NONE;
    }
    PyObject *frame = PyBytes_FromStringAndSize(NULL, body + 3);
    if (frame == NULL) {
        Py_XDECREF(data);
        return NULL;
    }
    char *start = PyBytes_AS_STRING(frame), *out = start;
    *out++ = 0x03;  /* a Last frame, its u16 length little-endian (seed 002) */
    *out++ = (char)(body & 0xff);
    *out++ = (char)((body >> 8) & 0xff);
    *out++ = '{';
    if (size[0] >= 0) out = put_text(out, "GRP", text[0], size[0]);
    if (size[1] >= 0) out = put_text(out, "RID", text[1], size[1]);
    out = put_text(out, "ENC", "JSON", 4);
    out = put_text(out, "MID", text[2], size[2]);
    out = put_text(out, "TYP", "ACK", 3);
    if (pld_n >= 0) {
        memcpy(out, "\"PLD\":", 6);
        out += 6;
        memcpy(out, pld, (size_t)pld_n);
        out += pld_n;
        *out++ = ',';
    }
    if (size[3] >= 0) out = put_text(out, "SRC", text[3], size[3]);
    if (size[4] >= 0) out = put_text(out, "TRC", text[4], size[4]);
    out[-1] = '}';
    Py_XDECREF(data);
    assert(out - start == body + 3);
    return frame;
}
