/*
 * Optional C accelerator of the data path: what the broker and the clients do to every message
 * without needing the message's values (bus/link/wire.py, bus/message/header.py; PROTOCOL.md sections 1-3).
 *
 * scan(buffer, start, max_frame, max_message) -> (items, end)
 *     The complete single-frame messages (Last frames) and Pings at the front of a receive
 *     buffer: each message as bytes, each Ping as None. It stops before anything else (a More,
 *     Empty or Command frame, a partial frame, a bad byte): bus.link.wire's reference decoder takes
 *     it from there and raises the documented errors, so this never has to.
 *
 * peek(data, max_depth, max_fields, json_only) -> tuple | None
 *     The routing header of a message body, read the way bus.message.message.decode_message reads it
 *     (binary data frame first, then Latin-1 JSON; json_only: JSON only), without building a
 *     single field:
 *     (enc, typ, grp, tgt, rpy, mid, rid, src, cmd, enc_field, flg, rcd, xpy, pld_start,
 *      pld_end, pld_fields, quirks, fields, clr, trc, rpl, seq)
 *     enc is 0 for a binary frame and 1 for JSON; the texts are the first top-level field of
 *     each name (None when absent; enc_field is the body's own ENC field); pld_start/pld_end bound the PLD value's bytes (-1 when
 *     absent) and pld_fields counts the fields inside it; quirks says the JSON holds an empty
 *     object or array, an empty name or an infinite number (where the JSON mapping is not the
 *     identity); fields counts every field of the body. The whole body is validated as the reference decoders validate it (every name,
 *     type, length, nesting and field count; for JSON every token, integer ranges, Latin-1
 *     values, name sizes), so a body that peek accepts decodes, and the other way round.
 *     None means "not the simple case": a body peek cannot vouch for (undecodable, a header
 *     field of an unusual type or with escapes, a JSON array) goes to the reference code.
 *
 * format_id(block, pos) -> str
 *     The 16 bytes of block at pos as the text of a version-4 UUID (bus.message.ids.new_id, whose
 *     reference formats them in Python): every message gets one.
 *
 * plain(value, depth, max_fields) -> bool, count_fields(value) -> int
 *     The JSON lane's checks of plain data (bus/message/jsonwire.py, whose _plain and _fields are the
 *     reference): every answer a service writes as JSON and every JSON payload it reads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#include "_hotpath.h"

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define JSON_SWAR 1 /* json_string reads eight bytes at a time (the lowest byte first) */
#endif

/* ---------------------------------------------------------------------------------------- */
/* Wire frames (seed 002): type byte, u16 little-endian length, data.                        */

enum { WT_EMPTY = 1, WT_MORE, WT_LAST, WT_EMPTY_LAST, WT_COMMAND, WT_PING };

static PyObject *
scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, max_frame, max_message;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &start, &max_frame, &max_message)) return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len, pos = start;
    PyObject *items = PyList_New(0);
    if (items == NULL) goto fail;
    while (pos < end) {
        int type = buf[pos];
        if (type == WT_PING) {
            if (PyList_Append(items, Py_None) < 0) goto fail;
            pos += 1;
            continue;
        }
        if (type != WT_LAST || pos + 3 > end) break;
        Py_ssize_t length = (Py_ssize_t)buf[pos + 1] | ((Py_ssize_t)buf[pos + 2] << 8);
        if (length == 0 || length > max_frame || length > max_message) break;
        if (pos + 3 + length > end) break;
        PyObject *data = PyBytes_FromStringAndSize((const char *)buf + pos + 3, length);
        if (data == NULL) goto fail;
        int rc = PyList_Append(items, data);
        Py_DECREF(data);
        if (rc < 0) goto fail;
        pos += 3 + length;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", items, pos);
fail:
    Py_XDECREF(items);
    PyBuffer_Release(&view);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Header fields (their layout: _hotpath.h)                                                   */

static void
header_init(Header *h)
{
    for (int i = 0; i < H_TEXTS; i++) h->start[i] = h->stop[i] = -1;
    h->flg_seen = h->rcd_seen = h->xpy_seen = h->seq_seen = 0;
    h->flg = h->rcd = h->xpy = h->seq = 0;
    h->unusual = 0;
    h->seen = 0;
    h->pld_start = h->pld_end = -1;
    h->pld_fields = 0;
}

/* Top-level names the header is read from: a second field of one of them is left to the
 * reference (which keeps both, the first one winning), so peek never has to choose. */
static void
header_seen(Header *h, int kind)
{
    unsigned bit = 1u << (kind >= 100 ? kind - 100 + H_TEXTS : kind);
    if (h->seen & bit) h->unusual = 1;
    h->seen |= bit;
}

/* The header name of a three-byte top-level name, or -1 (also for PLD, FLG, RCD: see below). */
static int
header_slot(const unsigned char *p)
{
    switch (p[0]) {
    case 'T': return (p[1] == 'Y' && p[2] == 'P') ? H_TYP : (p[1] == 'G' && p[2] == 'T') ? H_TGT
                   : (p[1] == 'R' && p[2] == 'C') ? H_TRC : -1;
    case 'G': return (p[1] == 'R' && p[2] == 'P') ? H_GRP : -1;
    case 'R': return (p[1] == 'P' && p[2] == 'Y') ? H_RPY : (p[1] == 'I' && p[2] == 'D') ? H_RID
                   : (p[1] == 'P' && p[2] == 'L') ? H_RPL : -1;
    case 'M': return (p[1] == 'I' && p[2] == 'D') ? H_MID : -1;
    case 'S': return (p[1] == 'R' && p[2] == 'C') ? H_SRC : -1;
    case 'C': return (p[1] == 'M' && p[2] == 'D') ? H_CMD : (p[1] == 'L' && p[2] == 'R') ? H_CLR : -1;
    case 'E': return (p[1] == 'N' && p[2] == 'C') ? H_ENC : -1;
    }
    return -1;
}

#define NAME_PLD 100
#define NAME_FLG 101
#define NAME_RCD 102
#define NAME_XPY 103
#define NAME_SEQ 104

static int
name_kind(const unsigned char *p, Py_ssize_t n)
{
    if (n != 3) return -1;
    if (p[0] == 'P' && p[1] == 'L' && p[2] == 'D') return NAME_PLD;
    if (p[0] == 'F' && p[1] == 'L' && p[2] == 'G') return NAME_FLG;
    if (p[0] == 'R' && p[1] == 'C' && p[2] == 'D') return NAME_RCD;
    if (p[0] == 'X' && p[1] == 'P' && p[2] == 'Y') return NAME_XPY;
    if (p[0] == 'S' && p[1] == 'E' && p[2] == 'Q') return NAME_SEQ;
    return header_slot(p);
}

/* ---------------------------------------------------------------------------------------- */
/* Binary data frames (seed 000; bus/frame/codec.py is the reference this mirrors).                */

static const int SIZES[18] = {-1, 0, -1, -1, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 1, 8, -1, -1};
enum { FT_FRAME = 0, FT_UDEF, FT_BYTES, FT_STRING, FT_S8, FT_U8, FT_S16, FT_U16, FT_S32, FT_U32,
       FT_S64, FT_U64, FT_FLOAT, FT_DOUBLE, FT_BOOLEAN, FT_DATE, FT_URI, FT_ARRAY };
#define MAX_LEVELS 48  /* deeper: left to the reference (whose recursion is not on the C stack) */

static uint16_t rd16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static uint32_t rd32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint64_t rd64(const unsigned char *p) { return ((uint64_t)rd32(p) << 32) | rd32(p + 4); }

/* DATE: the reference builds a datetime, which exists for years 1..9999 only. */
#define DATE_MIN (-62135596800000LL)
#define DATE_MAX (253402300799999LL)

static int
utf8_valid(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) { i++; continue; }
        int more;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { more = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { more = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { more = 3; cp = c & 0x07; }
        else return 0;
        if (i + more >= n) return 0;
        for (int k = 1; k <= more; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (more == 3 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
        i += more + 1;
    }
    return 1;
}

static int check_fixed(int code, const unsigned char *p)
{
    if (code == FT_DATE) {
        int64_t ms = (int64_t)rd64(p);
        return ms >= DATE_MIN && ms <= DATE_MAX;
    }
    return 1;
}

static int frame_ok(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end, int depth,
                    int level, Py_ssize_t *left, Header *h);

static int
array_ok(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end, int depth, int level,
         Py_ssize_t *left)
{
    while (pos < end) {
        if (*left <= 0) return 0;
        (*left)--;
        int code = buf[pos++];
        if (code > 17) return 0;
        int width = SIZES[code];
        if (width >= 0) {
            if (pos + width > end || !check_fixed(code, buf + pos)) return 0;
            pos += width;
            continue;
        }
        if (pos + 2 > end) return 0;
        Py_ssize_t length = rd16(buf + pos);
        pos += 2;
        if (length > end - pos) return 0;
        Py_ssize_t stop = pos + length;
        if (code == FT_FRAME || code == FT_ARRAY) {
            if (depth <= 0 || level >= MAX_LEVELS) return 0;
            int ok = code == FT_FRAME ? frame_ok(buf, pos, stop, depth - 1, level + 1, left, NULL)
                                      : array_ok(buf, pos, stop, depth - 1, level + 1, left);
            if (!ok) return 0;
        }
        pos = stop;
    }
    return 1;
}

static long long
fixed_int(int code, const unsigned char *p, int *is_int)
{
    *is_int = 1;
    switch (code) {
    case FT_S8: return (int8_t)p[0];
    case FT_U8: return p[0];
    case FT_S16: return (int16_t)rd16(p);
    case FT_U16: return rd16(p);
    case FT_S32: return (int32_t)rd32(p);
    case FT_U32: return rd32(p);
    case FT_S64: return (int64_t)rd64(p);
    case FT_U64: {
        uint64_t v = rd64(p);
        if (v > (uint64_t)LLONG_MAX) { *is_int = 0; return 0; }
        return (long long)v;
    }
    }
    *is_int = 0;
    return 0;
}

static int
frame_ok(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end, int depth, int level,
         Py_ssize_t *left, Header *h)
{
    while (pos < end) {
        if (*left <= 0) return 0;
        (*left)--;
        Py_ssize_t n = buf[pos++];
        if (pos + n >= end) return 0;
        const unsigned char *name = buf + pos;
        if (n && !utf8_valid(name, n)) return 0;
        int code = buf[pos + n];
        if (code > 17) return 0;
        Py_ssize_t vpos = pos + n + 1, vend, stop = 0;
        int width = SIZES[code];
        Py_ssize_t left_before = *left;
        if (width >= 0) {
            vend = vpos + width;
            if (vend > end || !check_fixed(code, buf + vpos)) return 0;
        } else {
            if (vpos + 4 > end) return 0;
            uint32_t length = rd32(buf + vpos);
            if ((uint64_t)length > (uint64_t)(end - vpos - 4)) return 0;
            stop = vpos + 4 + (Py_ssize_t)length;
            vend = stop;
            if (code == FT_FRAME || code == FT_ARRAY) {
                if (depth <= 0 || level >= MAX_LEVELS) return 0;
                int ok = code == FT_FRAME
                    ? frame_ok(buf, vpos + 4, stop, depth - 1, level + 1, left, NULL)
                    : array_ok(buf, vpos + 4, stop, depth - 1, level + 1, left);
                if (!ok) return 0;
            }
        }
        if (h != NULL) {
            int kind = name_kind(name, n);
            if (kind >= 0) header_seen(h, kind);
            if (kind >= 0 && kind < H_TEXTS) {
                if (h->start[kind] < 0) {
                    if (code != FT_STRING && code != FT_URI) h->unusual = 1;
                    h->start[kind] = vpos + 4;
                    h->stop[kind] = stop;
                }
            } else if (kind == NAME_PLD) {
                if (h->pld_start < 0) {
                    if (code != FT_FRAME) h->unusual = 1;
                    h->pld_start = vpos + 4;
                    h->pld_end = stop;
                    h->pld_fields = left_before - *left;
                }
            } else if (kind == NAME_FLG || kind == NAME_RCD || kind == NAME_XPY
                       || kind == NAME_SEQ) {
                int *seen = kind == NAME_FLG ? &h->flg_seen
                          : kind == NAME_RCD ? &h->rcd_seen
                          : kind == NAME_XPY ? &h->xpy_seen : &h->seq_seen;
                if (!*seen) {
                    *seen = 1;
                    int is_int = 0;
                    long long v = width >= 0 ? fixed_int(code, buf + vpos, &is_int) : 0;
                    if (!is_int) h->unusual = 1;
                    if (kind == NAME_FLG) h->flg = v;
                    else if (kind == NAME_RCD) h->rcd = v;
                    else if (kind == NAME_XPY) h->xpy = v;
                    else h->seq = v;
                }
            }
        }
        pos = vend;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------- */
/* Kestrel JSON (bus/frame/jsonmap.py from_json over json.loads is the reference this mirrors).     */

typedef struct {
    const unsigned char *p;
    Py_ssize_t n, pos;
    int max_depth;
    Py_ssize_t left;  /* fields still allowed (max_fields) */
    int quirks;       /* an empty object or array, an empty name, an infinite number or an
                       * exponent without a fraction: the JSON mapping is not the identity
                       * for these (PROTOCOL.md 1.7) */
} Json;

static void
skip_ws(Json *j)
{
    while (j->pos < j->n) {
        unsigned char c = j->p[j->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
        j->pos++;
    }
}

static int
hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int
hex4(Json *j, Py_ssize_t at)
{
    if (at + 4 > j->n) return -1;
    int v = 0;
    for (int k = 0; k < 4; k++) {
        int d = hexval(j->p[at + k]);
        if (d < 0) return -1;
        v = (v << 4) | d;
    }
    return v;
}

/* A string at j->pos (the opening quote). As a name (is_name) its UTF-8 size must be at most
 * 255 bytes and it must be valid text; as a value every character must be Latin-1. Sets
 * *escaped when it holds an escape. Returns 0 when the reference would refuse it. */
static int
json_string(Json *j, int is_name, int *escaped)
{
    Py_ssize_t pos = j->pos + 1;
    Py_ssize_t utf8 = 0;
    *escaped = 0;
    while (1) {
#ifdef JSON_SWAR
        /* Eight bytes at a time: the first that is not plain ASCII (a quote, a backslash, a
         * control character or a byte >= 0x80) is found at once, and read one by one below.
         * Most of a message's text is MIDs, groups and inboxes. Borrows only ever mark bytes
         * above a byte that is not plain, so the lowest mark is exact. */
        if (pos + 8 <= j->n) {
            uint64_t v;
            memcpy(&v, j->p + pos, 8);
            uint64_t quote = v ^ 0x2222222222222222ULL, slash = v ^ 0x5C5C5C5C5C5C5C5CULL;
            uint64_t special = (v | ((v - 0x2020202020202020ULL) & ~v)
                | ((quote - 0x0101010101010101ULL) & ~quote)
                | ((slash - 0x0101010101010101ULL) & ~slash)) & 0x8080808080808080ULL;
            if (!special) {
                pos += 8;
                utf8 += 8;
                continue;
            }
            int plain = __builtin_ctzll(special) >> 3;
            pos += plain;
            utf8 += plain;
        } else if (pos >= j->n) {
            return 0;
        }
#else
        if (pos >= j->n) return 0;
#endif
        unsigned char c = j->p[pos];
        if (c == '"') break;
        if (c < 0x20) return 0;  /* json.loads is strict: no raw control characters */
        if (c != '\\') {
            utf8 += c < 0x80 ? 1 : 2;  /* Latin-1 text: one character per byte */
            pos++;
            continue;
        }
        *escaped = 1;
        if (pos + 1 >= j->n) return 0;
        unsigned char e = j->p[pos + 1];
        if (e == 'u') {
            int cp = hex4(j, pos + 2);
            if (cp < 0) return 0;
            pos += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF && pos + 1 < j->n && j->p[pos] == '\\'
                && j->p[pos + 1] == 'u') {
                int low = hex4(j, pos + 2);
                if (low >= 0xDC00 && low <= 0xDFFF) {  /* a pair: one character */
                    if (!is_name) return 0;
                    utf8 += 4;
                    pos += 6;
                    continue;
                }
            }
            if (!is_name && cp > 0xFF) return 0;
            if (cp >= 0xD800 && cp <= 0xDFFF) return 0;  /* a lone surrogate is not text */
            utf8 += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
            continue;
        }
        if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r'
            && e != 't') return 0;
        utf8 += 1;
        pos += 2;
    }
    if (is_name && utf8 > 255) return 0;
    j->pos = pos + 1;
    return 1;
}

/* A number at j->pos. *integer is set when it has no fraction or exponent; *value holds it
 * when it fits a long long (*fits). Returns 0 for a malformed number or an integer outside
 * -2**63 .. 2**64-1 (the frame's integer types). */
static int
json_number(Json *j, int *integer, long long *value, int *fits)
{
    Py_ssize_t pos = j->pos;
    int negative = 0;
    if (pos < j->n && j->p[pos] == '-') { negative = 1; pos++; }
    if (pos >= j->n) return 0;
    Py_ssize_t digits_at = pos;
    if (j->p[pos] == '0') {
        pos++;
    } else if (j->p[pos] >= '1' && j->p[pos] <= '9') {
        while (pos < j->n && j->p[pos] >= '0' && j->p[pos] <= '9') pos++;
    } else {
        return 0;
    }
    Py_ssize_t digits_end = pos;
    *integer = 1;
    if (pos < j->n && j->p[pos] == '.' && pos + 1 < j->n && j->p[pos + 1] >= '0'
        && j->p[pos + 1] <= '9') {
        *integer = 0;
        pos += 1;
        while (pos < j->n && j->p[pos] >= '0' && j->p[pos] <= '9') pos++;
    }
    if (pos < j->n && (j->p[pos] == 'e' || j->p[pos] == 'E')) {
        Py_ssize_t at = pos + 1;
        if (at < j->n && (j->p[at] == '+' || j->p[at] == '-')) at++;
        if (at < j->n && j->p[at] >= '0' && j->p[at] <= '9') {
            *integer = 0;
            pos = at;
            while (pos < j->n && j->p[pos] >= '0' && j->p[pos] <= '9') pos++;
        }
    }
    *fits = 0;
    if (*integer) {
        /* -2**63 .. 2**64-1: at most 20 digits, compared as unsigned magnitudes. */
        Py_ssize_t count = digits_end - digits_at;
        if (count > 20) return 0;
        uint64_t mag = 0;
        for (Py_ssize_t k = digits_at; k < digits_end; k++) {
            unsigned d = j->p[k] - '0';
            if (mag > (UINT64_MAX - d) / 10) return 0;
            mag = mag * 10 + d;
        }
        if (negative) {
            if (mag > (uint64_t)1 << 63) return 0;
            *value = mag == ((uint64_t)1 << 63) ? LLONG_MIN : -(long long)mag;
            *fits = 1;
        } else if (mag <= (uint64_t)LLONG_MAX) {
            *value = (long long)mag;
            *fits = 1;
        }
    }
    j->pos = pos;
    return 1;
}

static int json_value(Json *j, int depth, int level);

/* A number that is not an integer: json.loads makes a float of it, infinite when it overflows
 * (1e400), which the JSON mapping turns into null on the way out: a quirk. So is an exponent
 * without a fraction (1e5): Java's JsonFrameParser reads it as a STRING, and the frame path
 * writes it back as 100000.0 (PROTOCOL.md 1.7). */
static void
check_float(Json *j, Py_ssize_t start)
{
    char tmp[64];
    Py_ssize_t n = j->pos - start;
    if (memchr(j->p + start, '.', (size_t)n) == NULL) { j->quirks = 1; return; }
    if (n >= (Py_ssize_t)sizeof tmp) {
        /* Long numbers: only a large exponent overflows; look for one. */
        const unsigned char *e = memchr(j->p + start, 'e', (size_t)n);
        if (e == NULL) e = memchr(j->p + start, 'E', (size_t)n);
        if (e != NULL) j->quirks = 1;
        return;
    }
    memcpy(tmp, j->p + start, (size_t)n);
    tmp[n] = 0;
    double d = PyOS_string_to_double(tmp, NULL, NULL);
    if (d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); j->quirks = 1; return; }
    if (!isfinite(d)) j->quirks = 1;
}

/* An object or array at j->pos; depth is what the reference's _check_depth sees for it. */
static int
json_container(Json *j, int depth, int level, Header *h)
{
    if (depth < 0 || level >= MAX_LEVELS) return 0;
    int object = j->p[j->pos] == '{';
    unsigned char close = object ? '}' : ']';
    j->pos++;
    skip_ws(j);
    if (j->pos < j->n && j->p[j->pos] == close) { j->pos++; j->quirks = 1; return 1; }
    while (1) {
        if (j->left <= 0) return 0;
        j->left--;
        int kind = -1;
        if (object) {
            if (j->pos >= j->n || j->p[j->pos] != '"') return 0;
            Py_ssize_t name_at = j->pos + 1;
            int escaped;
            if (!json_string(j, 1, &escaped)) return 0;
            if (j->pos - 1 == name_at) j->quirks = 1;
            if (h != NULL) {
                /* An escaped top-level name might spell a header name: not the simple case. */
                if (escaped) h->unusual = 1;
                else kind = name_kind(j->p + name_at, j->pos - 1 - name_at);
                if (kind >= 0) header_seen(h, kind);
            }
            skip_ws(j);
            if (j->pos >= j->n || j->p[j->pos] != ':') return 0;
            j->pos++;
            skip_ws(j);
        }
        if (j->pos >= j->n) return 0;
        Py_ssize_t value_at = j->pos;
        unsigned char c = j->p[value_at];
        if (kind >= 0 && kind < H_TEXTS && h->start[kind] < 0) {
            int escaped = 1;
            if (c != '"' || !json_string(j, 0, &escaped)) {
                if (c == '"') return 0;
                h->unusual = 1;  /* not a string: the reference makes text of it */
                if (!json_value(j, depth - 1, level + 1)) return 0;
            } else if (escaped) {
                h->unusual = 1;
            }
            h->start[kind] = value_at + 1;
            h->stop[kind] = j->pos - 1;
        } else if ((kind == NAME_FLG && !h->flg_seen) || (kind == NAME_RCD && !h->rcd_seen)
                   || (kind == NAME_XPY && !h->xpy_seen) || (kind == NAME_SEQ && !h->seq_seen)) {
            int integer = 0, fits = 0;
            long long v = 0;
            if (c == '-' || (c >= '0' && c <= '9')) {
                if (!json_number(j, &integer, &v, &fits)) return 0;
                if (!integer || !fits) h->unusual = 1;
            } else {
                h->unusual = 1;
                if (!json_value(j, depth - 1, level + 1)) return 0;
            }
            if (kind == NAME_FLG) { h->flg_seen = 1; h->flg = v; }
            else if (kind == NAME_RCD) { h->rcd_seen = 1; h->rcd = v; }
            else if (kind == NAME_XPY) { h->xpy_seen = 1; h->xpy = v; }
            else { h->seq_seen = 1; h->seq = v; }
        } else {
            Py_ssize_t left_before = j->left;
            if (!json_value(j, depth - 1, level + 1)) return 0;
            if (kind == NAME_PLD && h->pld_start < 0) {
                h->pld_start = value_at;
                h->pld_end = j->pos;
                h->pld_fields = left_before - j->left;
                if (c != '{') h->unusual = 1;
            }
        }
        skip_ws(j);
        if (j->pos >= j->n) return 0;
        c = j->p[j->pos++];
        if (c == close) return 1;
        if (c != ',') return 0;
        skip_ws(j);
    }
}

static int
json_literal(Json *j, const char *word, Py_ssize_t n)
{
    if (j->pos + n > j->n || memcmp(j->p + j->pos, word, (size_t)n) != 0) return 0;
    j->pos += n;
    return 1;
}

static int
json_value(Json *j, int depth, int level)
{
    if (j->pos >= j->n) return 0;
    unsigned char c = j->p[j->pos];
    int escaped, integer, fits;
    long long v;
    switch (c) {
    case '{':
    case '[': return json_container(j, depth, level, NULL);
    case '"': return json_string(j, 0, &escaped);
    case 't': return json_literal(j, "true", 4);
    case 'f': return json_literal(j, "false", 5);
    case 'n': return json_literal(j, "null", 4);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            Py_ssize_t start = j->pos;
            if (!json_number(j, &integer, &v, &fits)) return 0;
            if (!integer) check_float(j, start);
            return 1;
        }
        return 0;
    }
}

/* ---------------------------------------------------------------------------------------- */

static PyObject *
span_text(const unsigned char *buf, Py_ssize_t start, Py_ssize_t stop)
{
    if (start < 0) Py_RETURN_NONE;
    return PyUnicode_DecodeLatin1((const char *)buf + start, stop - start, NULL);
}

/* The header of a body as peek reads it: 1 when it vouches for the body (*enc 0 for a binary
 * frame, 1 for JSON; *quirks and *left as the JSON reader leaves them), 0 when the body is to
 * be decoded instead. */
int
read_head(const unsigned char *buf, Py_ssize_t n, int max_depth, Py_ssize_t max_fields,
          int json_only, Header *h, int *enc, int *quirks, Py_ssize_t *left)
{
    header_init(h);
    *enc = 0;
    *quirks = 0;
    *left = max_fields;
    if (max_depth > 500) max_depth = 500;  /* bus.frame.codec.MAX_DEPTH */
    if (json_only || !frame_ok(buf, 0, n, max_depth, 0, left, h)) {
        /* Not a binary frame: Latin-1 JSON, an object (an array has no header). */
        header_init(h);
        *enc = 1;
        Json j = {buf, n, 0, max_depth, max_fields, 0};
        skip_ws(&j);
        if (j.pos >= n || buf[j.pos] != '{' || !json_container(&j, max_depth, 0, h)) return 0;
        skip_ws(&j);
        if (j.pos != n) return 0;
        *quirks = j.quirks;
        *left = j.left;
    }
    return !h->unusual;
}

static PyObject *
peek(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int max_depth, json_only;
    Py_ssize_t max_fields;
    if (!PyArg_ParseTuple(args, "y*inp", &view, &max_depth, &max_fields, &json_only)) return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Header h;
    int enc, quirks;
    Py_ssize_t left;
    if (!read_head(buf, view.len, max_depth, max_fields, json_only, &h, &enc, &quirks, &left))
        goto simple_no;
    PyObject *result = PyTuple_New(22);
    if (result == NULL) goto error;
    PyTuple_SET_ITEM(result, 0, PyLong_FromLong(enc));
    for (int i = 0; i < H_TEXTS; i++) {
        PyObject *text = span_text(buf, h.start[i], h.stop[i]);
        if (text == NULL) { Py_DECREF(result); goto error; }
        PyTuple_SET_ITEM(result, i < H_FIRST_TEXTS ? 1 + i : 18 + i - H_FIRST_TEXTS, text);
    }
    PyTuple_SET_ITEM(result, 10, h.flg_seen ? PyLong_FromLongLong(h.flg) : Py_NewRef(Py_None));
    PyTuple_SET_ITEM(result, 11, h.rcd_seen ? PyLong_FromLongLong(h.rcd) : Py_NewRef(Py_None));
    PyTuple_SET_ITEM(result, 12, h.xpy_seen ? PyLong_FromLongLong(h.xpy) : Py_NewRef(Py_None));
    PyTuple_SET_ITEM(result, 13, PyLong_FromSsize_t(h.pld_start));
    PyTuple_SET_ITEM(result, 14, PyLong_FromSsize_t(h.pld_end));
    PyTuple_SET_ITEM(result, 15, PyLong_FromSsize_t(h.pld_fields));
    PyTuple_SET_ITEM(result, 16, PyBool_FromLong(quirks));
    PyTuple_SET_ITEM(result, 17, PyLong_FromSsize_t(max_fields - left));
    PyTuple_SET_ITEM(result, 21, h.seq_seen ? PyLong_FromLongLong(h.seq) : Py_NewRef(Py_None));
    for (int i = 0; i < 22; i++) {
        if (PyTuple_GET_ITEM(result, i) == NULL) { Py_DECREF(result); goto error; }
    }
    PyBuffer_Release(&view);
    return result;
simple_no:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    PyBuffer_Release(&view);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Message ids (bus/message/ids.py)                                                                   */

void
format_uuid(const unsigned char *p, unsigned char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0, o = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        unsigned int high = p[i] >> 4;
        if (i == 6) high = 4;                    /* the version: 4 */
        if (i == 8) high = 8 | (high & 3);       /* the variant: 10xx (RFC 9562) */
        out[o++] = (unsigned char)digits[high];
        out[o++] = (unsigned char)digits[p[i] & 15];
    }
}

static PyObject *
format_id(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "format_id(block: bytes, pos: int)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    if (pos < 0 || pos > PyBytes_GET_SIZE(args[0]) - 16) {
        PyErr_SetString(PyExc_ValueError, "format_id: fewer than 16 bytes at pos");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]) + pos;
    PyObject *text = PyUnicode_New(36, 127);
    if (text == NULL) return NULL;
    format_uuid(p, PyUnicode_1BYTE_DATA(text));
    return text;
}

/* ---------------------------------------------------------------------------------------- */
/* The JSON lane's plain data (bus/message/jsonwire.py: _plain, _fields)                              */

/* 1 when value is plain data whose JSON mapping is the identity, as bus.message.jsonwire._plain
 * decides it (exact types only: str in Latin-1, int of 64 bits, bool, None, a float that is
 * 0 or of a magnitude in 1e-4 .. 1e16, non-empty dict with names of 1..255 UTF-8 bytes,
 * non-empty list, tuple), nesting within depth and every container's length counted against
 * *left; 0 otherwise; -1 with an exception set. */
int
plain_value(PyObject *value, int depth, Py_ssize_t *left)
{
    if (PyUnicode_CheckExact(value)) return PyUnicode_KIND(value) == PyUnicode_1BYTE_KIND;
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        (void)PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow == 0) return PyErr_Occurred() ? -1 : 1;
        if (overflow < 0) return 0;
        (void)PyLong_AsUnsignedLongLong(value);
        if (!PyErr_Occurred()) return 1;
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        return 0;
    }
    if (value == Py_None || PyBool_Check(value)) return 1;
    if (PyFloat_CheckExact(value)) {
        /* Only floats written without an exponent (Java reads 1e+16 as a string). */
        double d = fabs(PyFloat_AS_DOUBLE(value));
        return (d == 0.0 || (d >= 1e-4 && d < 1e16)) ? 1 : 0;
    }
    if (PyDict_CheckExact(value)) {
        /* Empty containers too: the frame path writes an empty nested frame as [] (as Java). */
        if (depth <= 0 || PyDict_GET_SIZE(value) == 0) return 0;
        *left -= PyDict_GET_SIZE(value);
        if (*left < 0) return 0;
        Py_ssize_t pos = 0;
        PyObject *name, *item;
        while (PyDict_Next(value, &pos, &name, &item)) {
            if (!PyUnicode_CheckExact(name)) return 0;
            Py_ssize_t size = PyUnicode_GET_LENGTH(name);
            if (!PyUnicode_IS_ASCII(name)) {
                if (PyUnicode_AsUTF8AndSize(name, &size) == NULL) {  /* a lone surrogate */
                    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
                    PyErr_Clear();
                    return 0;
                }
            }
            if (size < 1 || size > 255) return 0;
            int ok = plain_value(item, depth - 1, left);
            if (ok != 1) return ok;
        }
        return 1;
    }
    if (PyList_CheckExact(value) || PyTuple_CheckExact(value)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
        if (depth <= 0 || n == 0) return 0;
        *left -= n;
        if (*left < 0) return 0;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(value); i++) {
            int ok = plain_value(PySequence_Fast_GET_ITEM(value, i), depth - 1, left);
            if (ok != 1) return ok;
        }
        return 1;
    }
    return 0;  /* bytes, datetime, DataFrame, Typed, subclasses: the frame path knows them */
}

static PyObject *
plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "plain(value, depth: int, max_fields: int)");
        return NULL;
    }
    long depth = PyLong_AsLong(args[1]);
    if (depth == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t left = PyLong_AsSsize_t(args[2]);
    if (left == -1 && PyErr_Occurred()) return NULL;
    if (depth > 500) depth = 500;  /* bus.frame.codec.MAX_DEPTH: no deeper recursion than that */
    int ok = plain_value(args[0], (int)depth, &left);
    if (ok < 0) return NULL;
    return PyBool_FromLong(ok);
}

/* How many fields orjson's reading of a JSON text holds, nested ones included
 * (bus.message.jsonwire._fields: a dict or list counts its items and what they hold). */
static Py_ssize_t
fields_in(PyObject *value, int depth)
{
    Py_ssize_t total = 0;
    if (depth > 1000) return 0;  /* orjson reads no deeper than 1024 */
    if (PyDict_CheckExact(value)) {
        Py_ssize_t pos = 0;
        PyObject *name, *item;
        total = PyDict_GET_SIZE(value);
        while (PyDict_Next(value, &pos, &name, &item)) total += fields_in(item, depth + 1);
    } else if (PyList_CheckExact(value)) {
        total = PyList_GET_SIZE(value);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++)
            total += fields_in(PyList_GET_ITEM(value, i), depth + 1);
    }
    return total;
}

static PyObject *
count_fields(PyObject *self, PyObject *value)
{
    return PyLong_FromSsize_t(fields_in(value, 0));
}

/* ---------------------------------------------------------------------------------------- */
/* The broker's usual message: bus/broker/server.py Broker._dispatch and Link.write are the   */
/* reference this mirrors (bus/broker/link.py Link._route_fast calls it).                      */

static PyObject *S_transport, *S_closing, *S_paused, *S_queue, *S_batch, *S_bytes_out,
    *S_messages_out, *S_consumers, *S_turn, *S_write;

#define FLAG_ALL 1      /* bus.message.message.Flag.ALL */
#define LAST_FRAME 3    /* bus.link.wire.FrameType.LAST */
#define MAX_FRAME 16381 /* bus.link.wire.DEFAULT_MAX_FRAME */
/* Bytes with_seq adds at most: a U64 field (13), or a JSON member "SEQ":<20 digits>, (27). */
#define SEQ_ROOM 32

int
span_is(const unsigned char *buf, const Header *h, int kind, const char *text, Py_ssize_t n)
{
    return h->start[kind] >= 0 && h->stop[kind] - h->start[kind] == n
        && memcmp(buf + h->start[kind], text, (size_t)n) == 0;
}

/* Whether SRC and CLR already name the sender (bus/broker/stamp.py Stamper.stamp's first
 * test): the message goes on as it came. */
int
stamped(const unsigned char *buf, const Header *h, int request, const char *office,
        Py_ssize_t office_n, int trusted)
{
    if (!trusted && h->start[H_CLR] >= 0 && !span_is(buf, h, H_CLR, office, office_n)) return 0;
    if (h->start[H_SRC] < 0) return !request;
    Py_ssize_t n = h->stop[H_SRC] - h->start[H_SRC];
    const unsigned char *src = buf + h->start[H_SRC];
    if (n < office_n || memcmp(src, office, (size_t)office_n) != 0) return 0;
    return n == office_n || src[office_n] == '.';
}

static int
add_to_attr(PyObject *obj, PyObject *name, Py_ssize_t amount)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) return -1;
    PyObject *step = PyLong_FromSsize_t(amount);
    if (step == NULL) { Py_DECREF(value); return -1; }
    PyObject *sum = PyNumber_Add(value, step);
    Py_DECREF(value);
    Py_DECREF(step);
    if (sum == NULL) return -1;
    int failed = PyObject_SetAttr(obj, name, sum);
    Py_DECREF(sum);
    return failed;
}

/* Link.write: a link takes a message at once only with a transport, not closing, not paused,
 * nothing queued (1, *batch a new reference to its batch); anything else (queueing, eviction,
 * a silent drop) is Python's (0); -1: an exception. */
static int
writable(PyObject *link, PyObject **batch)
{
    PyObject *value = PyObject_GetAttr(link, S_transport);
    if (value == NULL) return -1;
    int usable = value != Py_None;
    Py_DECREF(value);
    PyObject *names[3] = {S_closing, S_paused, S_queue};
    for (int k = 0; usable && k < 3; k++) {
        value = PyObject_GetAttr(link, names[k]);
        if (value == NULL) return -1;
        int truth = PyObject_IsTrue(value);
        Py_DECREF(value);
        if (truth < 0) return -1;
        usable = !truth;
    }
    if (!usable) return 0;
    value = PyObject_GetAttr(link, S_batch);
    if (value == NULL) return -1;
    if (!PyList_CheckExact(value)) { Py_DECREF(value); return 0; }
    *batch = value;
    return 1;
}

/* The consumer link a request or an answer to a group goes to, when it can take it at once
 * (0, *target and *batch set, borrowed/new), or 1 when the Python path is to route it. */
static int
writable_consumer(PyObject *groups, PyObject *links, PyObject *group, PyObject **entry_out,
                  Py_ssize_t *turn_out, PyObject **target, PyObject **batch)
{
    PyObject *entry = PyDict_GetItemWithError(groups, group);
    if (entry == NULL) return PyErr_Occurred() ? -1 : 1;
    PyObject *consumers = PyObject_GetAttr(entry, S_consumers);
    if (consumers == NULL) return -1;
    if (!PyList_CheckExact(consumers) || PyList_GET_SIZE(consumers) == 0) {
        Py_DECREF(consumers);
        return 1;
    }
    PyObject *turn_obj = PyObject_GetAttr(entry, S_turn);
    if (turn_obj == NULL) { Py_DECREF(consumers); return -1; }
    Py_ssize_t turn = PyLong_AsSsize_t(turn_obj);
    Py_DECREF(turn_obj);
    if (turn < 0) { Py_DECREF(consumers); return PyErr_Occurred() ? -1 : 1; }
    turn %= PyList_GET_SIZE(consumers);
    PyObject *link = PyDict_GetItemWithError(links, PyList_GET_ITEM(consumers, turn));
    Py_DECREF(consumers);
    if (link == NULL) return PyErr_Occurred() ? -1 : 1;
    int usable = writable(link, batch);
    if (usable <= 0) return usable < 0 ? -1 : 1;
    *entry_out = entry;
    *turn_out = turn;
    *target = link;
    return 0;
}

/* A body as one Last frame (bus.link.wire.encode_message): type byte, u16 little-endian length. */
static PyObject *
framed_body(const unsigned char *buf, Py_ssize_t n)
{
    PyObject *framed = PyBytes_FromStringAndSize(NULL, n + 3);
    if (framed == NULL) return NULL;
    char *out = PyBytes_AS_STRING(framed);
    out[0] = LAST_FRAME;
    out[1] = (char)(n & 0xFF);
    out[2] = (char)((n >> 8) & 0xFF);
    memcpy(out + 3, buf, (size_t)n);
    return framed;
}

/* Link.write's usual case: the frame joins the link's batch (the link joins the broker's dirty
 * list with its first), counted. Returns 0 with an exception set on failure. */
static int
append_to(PyObject *link, PyObject *batch, PyObject *framed, PyObject *dirty)
{
    int first = PyList_GET_SIZE(batch) == 0;
    if (PyList_Append(batch, framed) < 0) return 0;
    if (first && PyList_Append(dirty, link) < 0) return 0;
    return add_to_attr(link, S_bytes_out, PyBytes_GET_SIZE(framed)) == 0
        && add_to_attr(link, S_messages_out, 1) == 0;
}

/* Journal (Broker._journal), take the consumer's turn, and hand it the framed body. Returns 0
 * with an exception set on failure. */
static int
write_routed(PyObject *raw, const unsigned char *buf, Py_ssize_t n, PyObject *journal,
             PyObject *entry, Py_ssize_t turn, PyObject *target, PyObject *batch, PyObject *dirty)
{
    if (journal != Py_None) {  /* journaled as routed, whatever follows */
        PyObject *seq = PyObject_CallOneArg(journal, raw);
        if (seq == NULL) return 0;
        Py_DECREF(seq);
    }
    PyObject *next_turn = PyLong_FromSsize_t(turn + 1);
    if (next_turn == NULL) return 0;
    int failed = PyObject_SetAttr(entry, S_turn, next_turn);
    Py_DECREF(next_turn);
    if (failed < 0) return 0;
    PyObject *framed = framed_body(buf, n);
    if (framed == NULL) return 0;
    int ok = append_to(target, batch, framed, dirty);
    Py_DECREF(framed);
    return ok;
}

/* The body an event is delivered as: with a journal, journaled (Broker._journal) and given its
 * SEQ (bus.broker.replay.with_seq) when the journal took it; else the body itself, framed. */
static PyObject *
delivered_event(PyObject *raw, int enc, PyObject *journal, PyObject *with_seq)
{
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(raw);
    Py_ssize_t n = PyBytes_GET_SIZE(raw);
    if (journal == Py_None) return framed_body(buf, n);
    PyObject *seq = PyObject_CallOneArg(journal, raw);
    if (seq == NULL) return NULL;
    if (seq == Py_None) {  /* the filter left it out, or the write failed (counted, logged) */
        Py_DECREF(seq);
        return framed_body(buf, n);
    }
    PyObject *code = PyLong_FromLong(enc);
    PyObject *body =
        code == NULL ? NULL : PyObject_CallFunctionObjArgs(with_seq, raw, code, seq, NULL);
    Py_XDECREF(code);
    Py_DECREF(seq);
    if (body == NULL) return NULL;
    PyObject *framed = NULL;
    if (!PyBytes_Check(body) || PyBytes_GET_SIZE(body) > MAX_FRAME)
        PyErr_SetString(PyExc_ValueError, "with_seq: not one frame's body");
    else
        framed = framed_body((const unsigned char *)PyBytes_AS_STRING(body),
                             PyBytes_GET_SIZE(body));
    Py_DECREF(body);
    return framed;
}

/* An event to every subscriber (Broker._deliver): a link that cannot take it at once gets it
 * through its own Link.write (which queues, evicts or drops, and counts). 1: routed (*written
 * grows by the bytes batched here), 2: routed, through Link.write for some link (an eviction
 * may have closed the sender's own link: the run stops there), 0: nobody subscribes (Python's
 * path journals it and counts the drop), -1: an exception. */
static int
route_event(PyObject *raw, int enc, const Header *h, PyObject *subscribers, PyObject *links,
            PyObject *dirty, PyObject *journal, PyObject *with_seq, Py_ssize_t *written)
{
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(raw);
    PyObject *group = PyUnicode_DecodeLatin1(
        (const char *)buf + h->start[H_GRP], h->stop[H_GRP] - h->start[H_GRP], NULL);
    if (group == NULL) return -1;
    PyObject *numbers = PyObject_CallOneArg(subscribers, group);
    Py_DECREF(group);
    if (numbers == NULL) return -1;
    if (!PyList_Check(numbers) || PyList_GET_SIZE(numbers) == 0) {
        Py_DECREF(numbers);
        return 0;
    }
    PyObject *framed = delivered_event(raw, enc, journal, with_seq);
    if (framed == NULL) { Py_DECREF(numbers); return -1; }
    int ok = 1, wrote = 0;
    for (Py_ssize_t k = 0; ok && k < PyList_GET_SIZE(numbers); k++) {
        PyObject *link = PyDict_GetItemWithError(links, PyList_GET_ITEM(numbers, k));
        if (link == NULL) {  /* gone: skipped, as _deliver does */
            ok = !PyErr_Occurred();
            continue;
        }
        Py_INCREF(link);
        PyObject *batch = NULL;
        /* After a Link.write, the dirty list may be another (an eviction flushes it): the
         * rest of this event's links go through Link.write too. */
        int usable = wrote ? 0 : writable(link, &batch);
        if (usable > 0) {
            ok = append_to(link, batch, framed, dirty);
            Py_DECREF(batch);
            if (ok) *written += PyBytes_GET_SIZE(framed);
        } else if (usable == 0) {
            PyObject *done = PyObject_CallMethodOneArg(link, S_write, framed);
            ok = done != NULL;
            wrote = 1;
            Py_XDECREF(done);
        } else {
            ok = 0;
        }
        Py_DECREF(link);
    }
    Py_DECREF(framed);
    Py_DECREF(numbers);
    return ok ? 1 + wrote : -1;
}

/* bus.discovery.names.RESERVED_PREFIXES: the system's event types, left to the Python path's checks. */
int
reserved_type(const unsigned char *grp, Py_ssize_t n)
{
    return (n >= 4 && memcmp(grp, "OAM.", 4) == 0) || (n >= 7 && memcmp(grp, "_INBOX.", 7) == 0);
}

int
parse_run_args(PyObject *const *args, const char *who, RunArgs *run)
{
    if (!PyList_CheckExact(args[0]) || !PyBytes_Check(args[3])) {
        PyErr_Format(PyExc_TypeError, "%s(): bad argument types", who);
        return -1;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), limit = PyLong_AsSsize_t(args[2]);
    int trusted = PyObject_IsTrue(args[4]);
    Py_ssize_t max_size = PyLong_AsSsize_t(args[5]);
    long max_depth = PyLong_AsLong(args[6]);
    Py_ssize_t max_fields = PyLong_AsSsize_t(args[7]), max_name = PyLong_AsSsize_t(args[8]);
    if (PyErr_Occurred() || trusted < 0) return -1;
    if (start < 0 || limit < 0 || max_depth < 0 || max_depth > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "%s(): start, limit and max_depth must be >= 0", who);
        return -1;
    }
    Py_ssize_t end = PyList_GET_SIZE(args[0]); /* start past it: an empty run */
    if (limit < end - start) end = start + limit;
    run->bodies = args[0];
    run->start = start;
    run->end = end;
    run->office = PyBytes_AS_STRING(args[3]);
    run->office_n = PyBytes_GET_SIZE(args[3]);
    run->trusted = trusted;
    run->max_depth = (int)max_depth;
    run->max_size = max_size;
    run->max_fields = max_fields;
    run->max_name = max_name;
    return 0;
}

/* route(bodies, start, limit, office, trusted, max_size, max_depth, max_fields, max_name,
 *       groups, links, dirty, journal, subscribers, with_seq) -> (next, bytes_written, events)
 * Routes bodies[start:], at most ``limit`` of them, while each is the usual message: one whose
 * header peek vouches for and whose SRC and CLR already name the sender (office), and that is
 * either a request or an answer to a group (TYP RQS, ACK or NAK; GRP, no TGT, not for all)
 * whose round-robin consumer takes it at once, or an event (TYP EVT, no RPY, not a system
 * type) that someone subscribes to; with a journal (Broker._journal), each is journaled as
 * routed, and an event is delivered with its SEQ (with_seq). Returns the index of the first
 * body left to the Python path, the bytes batched here and how many of the routed ones were
 * events. */
static PyObject *
route(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "route() takes 15 arguments");
        return NULL;
    }
    PyObject *groups = args[9], *links = args[10], *dirty = args[11];
    PyObject *journal = args[12], *subscribers = args[13], *with_seq = args[14];
    RunArgs run;
    if (parse_run_args(args, "route", &run) < 0) return NULL;
    if (!PyDict_CheckExact(groups) || !PyDict_CheckExact(links) || !PyList_CheckExact(dirty)) {
        PyErr_SetString(PyExc_TypeError, "route(): bad argument types");
        return NULL;
    }
    Py_ssize_t count = run.end, i = run.start, written = 0, events = 0;
    for (; i < count; i++) {
        PyObject *raw = PyList_GET_ITEM(run.bodies, i);
        if (!PyBytes_CheckExact(raw)) break;
        Py_ssize_t n = PyBytes_GET_SIZE(raw);
        if (n == 0 || n > run.max_size || n > MAX_FRAME) break;
        const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(raw);
        Header h;
        int enc, quirks;
        Py_ssize_t left;
        if (!read_head(buf, n, run.max_depth, run.max_fields, 0, &h, &enc, &quirks, &left))
            break;
        int request = span_is(buf, &h, H_TYP, "RQS", 3), event = 0;
        if (!request && !span_is(buf, &h, H_TYP, "ACK", 3) && !span_is(buf, &h, H_TYP, "NAK", 3)) {
            /* an event, not a confirmed one (RPY); room left in its frame for its SEQ */
            if (!span_is(buf, &h, H_TYP, "EVT", 3) || h.start[H_RPY] >= 0
                || (journal != Py_None && n > MAX_FRAME - SEQ_ROOM))
                break;
            event = 1;
        }
        if (h.start[H_TGT] >= 0 || (!event && h.flg_seen && (h.flg & FLAG_ALL))) break;
        Py_ssize_t grp_n = h.stop[H_GRP] - h.start[H_GRP];
        if (h.start[H_GRP] < 0 || grp_n == 0 || grp_n > run.max_name) break;
        if (event && reserved_type(buf + h.start[H_GRP], grp_n)) break;
        if (!stamped(buf, &h, request, run.office, run.office_n, run.trusted)) break;
        if (event) {
            int routed = route_event(raw, enc, &h, subscribers, links, dirty, journal, with_seq,
                                     &written);
            if (routed < 0) return NULL;
            if (routed == 0) break;
            events++;
            if (routed == 2) { i++; break; }
            continue;
        }
        PyObject *group = PyUnicode_DecodeLatin1((const char *)buf + h.start[H_GRP], grp_n, NULL);
        if (group == NULL) return NULL;
        PyObject *entry = NULL, *target = NULL, *batch = NULL;
        Py_ssize_t turn = 0;
        int found = writable_consumer(groups, links, group, &entry, &turn, &target, &batch);
        Py_DECREF(group);
        if (found < 0) return NULL;
        if (found > 0) break;
        /* held across the journal's Python call, which could change the tables */
        Py_INCREF(entry);
        Py_INCREF(target);
        int ok = write_routed(raw, buf, n, journal, entry, turn, target, batch, dirty);
        Py_DECREF(entry);
        Py_DECREF(target);
        Py_DECREF(batch);
        if (!ok) return NULL;
        written += n + 3;
    }
    return Py_BuildValue("(nnn)", i, written, events);
}

/* The Object System's content lane: bus/native/_hotpath_objects.c. */
PyObject *content_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int content_lane_init(void);
/* The broker's confirm lane: bus/native/_hotpath_confirm.c. */
PyObject *confirm_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int confirm_lane_init(void);
/* A message's header fields as attributes: bus/native/_hotpath_fields.c. */
int head_field_add(PyObject *module);
/* One plain HTTP/1.1 request read whole (the gateway's): bus/native/_hotpath_http.c. */
PyObject *http_request(PyObject *self, PyObject *arg);
PyObject *json_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *http_answer(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* A service's usual answer: bus/native/_hotpath_answer.c. */
PyObject *ack_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Complete Last frames and Pings at the front of a buffer."},
    {"peek", peek, METH_VARARGS, "The routing header of a message body, or None."},
    {"format_id", (PyCFunction)(void (*)(void))format_id, METH_FASTCALL,
     "format_id(block, pos) -> str: 16 bytes of block at pos as a version-4 UUID's text."},
    {"plain", (PyCFunction)(void (*)(void))plain, METH_FASTCALL,
     "plain(value, depth, max_fields) -> bool: plain data whose JSON mapping is the identity."},
    {"count_fields", count_fields, METH_O,
     "count_fields(value) -> int: the fields a JSON reading holds, nested ones included."},
    {"route", (PyCFunction)(void (*)(void))route, METH_FASTCALL,
     "route(bodies, start, limit, office, trusted, max_size, max_depth, max_fields, max_name, "
     "groups, links, dirty, journal, subscribers, with_seq) -> (next, bytes, events): the "
     "broker's usual messages, routed."},
    {"confirm_run", (PyCFunction)(void (*)(void))confirm_run, METH_FASTCALL,
     "confirm_run(bodies, start, limit, office, trusted, max_size, max_depth, max_fields, "
     "max_name, office_text, seen, entries, now, window, record, ts, pending, subscribers, "
     "deliver, with_seq, ids, ids_pos, held, conn, ready, central) -> (next, seq, offset, "
     "ids_pos, dropped, evicted, error): the broker's confirmed publishes, journaled and "
     "answered."},
    {"ack_frame", (PyCFunction)(void (*)(void))ack_frame, METH_FASTCALL,
     "ack_frame(dumps, rpy, rid, mid, payload, src, trc, max_depth, max_fields, max_size) -> "
     "bytes | None: the ACK of a JSON request as one Last frame, when it is the usual one."},
    {"content_run", (PyCFunction)(void (*)(void))content_run, METH_FASTCALL,
     "content_run(buffer, start, limit, max_metadata, max_payload, sender_id, own_id, prefix, "
     "next_id) -> (items, end): a client's content objects, read and rewritten as the Object "
     "System router forwards them."},
    {"http_request", http_request, METH_O,
     "http_request(data) -> (target, headers, body, keep_alive) | None: data when it is exactly "
     "one plain HTTP/1.1 POST, read as uvicorn's callbacks would have."},
    {"json_request", (PyCFunction)(void (*)(void))json_request, METH_FASTCALL,
     "json_request(payload, group, reply_to, src, caller, trace, max_depth, max_fields, block, "
     "pos) -> (body, header) | None: a gateway's request as jsonwire.compose_request writes it."},
    {"http_answer", (PyCFunction)(void (*)(void))http_answer, METH_FASTCALL,
     "http_answer(raw, head, status, defaults, mid, trace, close) -> bytes | None: the HTTP "
     "response of a JSON ACK still on the wire, as the gateway writes it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hotpath", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__hotpath(void)
{
    struct { PyObject **slot; const char *name; } names[] = {
        {&S_transport, "transport"}, {&S_closing, "closing"}, {&S_paused, "paused"},
        {&S_queue, "queue"}, {&S_batch, "batch"}, {&S_bytes_out, "bytes_out"},
        {&S_messages_out, "messages_out"}, {&S_consumers, "consumers"}, {&S_turn, "turn"},
        {&S_write, "write"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        *names[k].slot = PyUnicode_InternFromString(names[k].name);
        if (*names[k].slot == NULL) return NULL;
    }
    if (content_lane_init() < 0 || confirm_lane_init() < 0) return NULL;
    PyObject *created = PyModule_Create(&module);
    if (created == NULL) return NULL;
    if (head_field_add(created) < 0) {
        Py_DECREF(created);
        return NULL;
    }
    return created;
}
