/*
 * Optional C accelerator of the data-frame codec (bus/frame/codec.py; PROTOCOL.md section 1).
 *
 * Same bytes, same values as the pure-Python codec, which stays the reference: when the fast
 * path meets anything unusual it gives up and runs the Python code, which raises the
 * documented DecodeError/EncodeError with its offset and reason. So the C code only has to be
 * right on valid input and never accept what Python refuses; the tests run the whole codec
 * suite against both and compare them on fuzzed input.
 *
 * encode(frame) -> bytes               the fast path, else bus.frame.codec._reference_encode
 * decode(data, limits=...) -> DataFrame the fast path, else bus.frame.codec._reference_decode
 * fast_encode, fast_decode             the fast path alone (tests), set_enabled, configure
 * make_field, encode_event             a plain field; an event's body from its parts
 * to_plain(frame) -> dict | list       DataFrame.to_dict (a TypeError: ask the reference)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

static PyTypeObject *field_cls = NULL;  /* bus.frame.frame.Field (a tuple subclass) */
static PyObject *types = NULL;          /* tuple of the 18 FieldType members */
static PyTypeObject *frame_cls = NULL;  /* bus.frame.frame.DataFrame */
static PyObject *date_from_millis = NULL;
static PyObject *millis_from_date = NULL;
static PyObject *empty_str = NULL;
static Py_ssize_t fields_offset = -1;   /* where DataFrame keeps its `_fields` slot */

/* Value size by type code; -1: variable (u32 length, u16 inside an ARRAY). */
static const int SIZES[18] = {-1, 0, -1, -1, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 1, 8, -1, -1};

enum { FT_FRAME = 0, FT_UDEF, FT_BYTES, FT_STRING, FT_S8, FT_U8, FT_S16, FT_U16, FT_S32, FT_U32,
       FT_S64, FT_U64, FT_FLOAT, FT_DOUBLE, FT_BOOLEAN, FT_DATE, FT_URI, FT_ARRAY };

/* The C code recurses once per nesting level. Deeper frames are left to the pure-Python
 * reference (its recursion does not grow the C stack on CPython >= 3.11), so the C stack used
 * stays small (about 40 KiB) whatever Limits.max_depth says, even on a thread's small stack. */
#define MAX_C_LEVELS 48
#define MAX_DECODE_DEPTH 500  /* bus.frame.codec.MAX_DEPTH */

static PyObject *s_max_size, *s_max_depth, *s_max_fields;

static PyObject *
bad(const char *reason)
{
    /* Any exception makes bus/frame/codec.py re-run the reference code for the exact error. */
    PyErr_SetString(PyExc_ValueError, reason);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Decoding                                                                                  */

/* A small cache of field names: header names repeat in every message. */
#define NAME_CACHE 256
static PyObject *name_cache[NAME_CACHE];

static PyObject *
decode_name(const unsigned char *p, Py_ssize_t n)
{
    unsigned int slot = (unsigned int)(n * 31 + p[0] * 7 + p[n - 1] * 13 + p[n / 2]) & (NAME_CACHE - 1);
    PyObject *cached = name_cache[slot];
    if (cached != NULL && PyUnicode_GET_LENGTH(cached) == n
        && memcmp(PyUnicode_1BYTE_DATA(cached), p, (size_t)n) == 0) {
        Py_INCREF(cached);
        return cached;
    }
    PyObject *name = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (name != NULL && n <= 64 && PyUnicode_IS_ASCII(name)) {
        Py_XSETREF(name_cache[slot], Py_NewRef(name));
    }
    return name;
}

/* Short text values repeat too (TYP, ENC, GRP, CMD): a second cache, for ASCII up to 24. */
static PyObject *text_cache[NAME_CACHE];

static PyObject *
decode_text(const unsigned char *p, Py_ssize_t n)
{
    if (n == 0) return Py_NewRef(empty_str);
    if (n > 24) return PyUnicode_DecodeLatin1((const char *)p, n, NULL);
    unsigned int slot = (unsigned int)(n * 31 + p[0] * 7 + p[n - 1] * 13 + p[n / 2]) & (NAME_CACHE - 1);
    PyObject *cached = text_cache[slot];
    if (cached != NULL && PyUnicode_GET_LENGTH(cached) == n
        && memcmp(PyUnicode_1BYTE_DATA(cached), p, (size_t)n) == 0) {
        return Py_NewRef(cached);
    }
    PyObject *text = PyUnicode_DecodeLatin1((const char *)p, n, NULL);
    if (text != NULL && PyUnicode_IS_ASCII(text)) {
        Py_XSETREF(text_cache[slot], Py_NewRef(text));
    }
    return text;
}

static uint16_t rd16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static uint32_t rd32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint64_t rd64(const unsigned char *p) { return ((uint64_t)rd32(p) << 32) | rd32(p + 4); }

static PyObject *
new_field(PyObject *name, int code, PyObject *value)
{
    /* Steals name and value. Field is a tuple subclass of three items; it is allocated
     * untracked and only a field that holds a frame or an array is given to the garbage
     * collector (text, numbers and None cannot form a cycle; CPython untracks such tuples too). */
    PyObject *field = (PyObject *)PyObject_GC_NewVar(PyTupleObject, field_cls, 3);
    if (field == NULL) {
        Py_DECREF(name);
        Py_DECREF(value);
        return NULL;
    }
    PyObject *type = PyTuple_GET_ITEM(types, code);
    Py_INCREF(type);
    PyTuple_SET_ITEM(field, 0, name);
    PyTuple_SET_ITEM(field, 1, type);
    PyTuple_SET_ITEM(field, 2, value);
    if (code == FT_FRAME || code == FT_ARRAY) PyObject_GC_Track(field);
    return field;
}

static PyObject *decode_fields(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end,
                               int depth, int level, Py_ssize_t *left);

static PyObject *
new_frame(PyObject *fields)
{
    /* Steals fields. A DataFrame with its `_fields` slot set, as DataFrame._trusted does. */
    PyObject *frame = frame_cls->tp_alloc(frame_cls, 0);
    if (frame == NULL) {
        Py_DECREF(fields);
        return NULL;
    }
    *(PyObject **)((char *)frame + fields_offset) = fields;
    return frame;
}

static PyObject *
frame_fields(PyObject *frame)
{
    /* Borrowed: the `_fields` list of a DataFrame (NULL if unset). */
    return *(PyObject **)((char *)frame + fields_offset);
}
static PyObject *decode_array(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end,
                              int depth, int level, Py_ssize_t *left);

static PyObject *
fixed_value(int code, const unsigned char *p)
{
    switch (code) {
    case FT_UDEF: Py_RETURN_NONE;
    case FT_S8: return PyLong_FromLong((int8_t)p[0]);
    case FT_U8: return PyLong_FromLong(p[0]);
    case FT_S16: return PyLong_FromLong((int16_t)rd16(p));
    case FT_U16: return PyLong_FromLong(rd16(p));
    case FT_S32: return PyLong_FromLong((int32_t)rd32(p));
    case FT_U32: return PyLong_FromUnsignedLong(rd32(p));
    case FT_S64: return PyLong_FromLongLong((int64_t)rd64(p));
    case FT_U64: return PyLong_FromUnsignedLongLong(rd64(p));
    case FT_FLOAT: {
        double d = PyFloat_Unpack4((const char *)p, 0);
        if (d == -1.0 && PyErr_Occurred()) return NULL;
        return PyFloat_FromDouble(d);
    }
    case FT_DOUBLE: {
        double d = PyFloat_Unpack8((const char *)p, 0);
        if (d == -1.0 && PyErr_Occurred()) return NULL;
        return PyFloat_FromDouble(d);
    }
    case FT_BOOLEAN: return PyBool_FromLong(p[0] >= 1 && p[0] <= 127);  /* Java: signed byte > 0 */
    case FT_DATE: {
        PyObject *ms = PyLong_FromLongLong((int64_t)rd64(p));
        if (ms == NULL) return NULL;
        PyObject *date = PyObject_CallOneArg(date_from_millis, ms);
        Py_DECREF(ms);
        return date;
    }
    }
    return bad("not a fixed type");
}

static PyObject *
variable_value(int code, const unsigned char *buf, Py_ssize_t pos, Py_ssize_t stop, int depth,
               int level, Py_ssize_t *left)
{
    switch (code) {
    case FT_STRING:
    case FT_URI:
        return decode_text(buf + pos, stop - pos);
    case FT_BYTES:
        return PyBytes_FromStringAndSize((const char *)buf + pos, stop - pos);
    case FT_FRAME: {
        if (depth <= 0) return bad("max_depth");
        if (level >= MAX_C_LEVELS) return bad("deep: left to the reference");
        PyObject *fields = decode_fields(buf, pos, stop, depth - 1, level + 1, left);
        if (fields == NULL) return NULL;
        return new_frame(fields);
    }
    default: /* FT_ARRAY */
        if (depth <= 0) return bad("max_depth");
        if (level >= MAX_C_LEVELS) return bad("deep: left to the reference");
        return decode_array(buf, pos, stop, depth - 1, level + 1, left);
    }
}

/* Fields collect on the C stack (up to STACK_FIELDS) and move into an exact-size list. */
#define STACK_FIELDS 64

typedef struct {
    PyObject *stack[STACK_FIELDS];
    PyObject *spill;  /* a list, once there are more than STACK_FIELDS */
    Py_ssize_t count;
} Collector;

static int
collect(Collector *c, PyObject *item)
{
    /* Steals item. */
    if (c->spill == NULL && c->count < STACK_FIELDS) {
        c->stack[c->count++] = item;
        return 0;
    }
    if (c->spill == NULL) {
        c->spill = PyList_New(c->count);
        if (c->spill == NULL) { Py_DECREF(item); return -1; }
        for (Py_ssize_t i = 0; i < c->count; i++) PyList_SET_ITEM(c->spill, i, c->stack[i]);
    }
    int rc = PyList_Append(c->spill, item);
    Py_DECREF(item);
    c->count++;
    return rc;
}

static PyObject *
collected_list(Collector *c)
{
    if (c->spill != NULL) return c->spill;
    PyObject *list = PyList_New(c->count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < c->count; i++) PyList_SET_ITEM(list, i, c->stack[i]);
    c->count = 0;
    return list;
}

static void
collector_clear(Collector *c)
{
    if (c->spill != NULL) {
        Py_CLEAR(c->spill);
    } else {
        for (Py_ssize_t i = 0; i < c->count; i++) Py_DECREF(c->stack[i]);
    }
    c->count = 0;
}

/* Whole fields repeat from message to message (TYP=RQS, ENC=FRAM, GRP=..., FLG=1): a field
 * whose bytes are short and whose value is immutable (not FRAME, ARRAY) is looked up by its
 * bytes and the same Field object shared. Fields are immutable tuples, so this is invisible. */
#define FIELD_CACHE 512
#define FIELD_CACHE_SPAN 40

typedef struct {
    PyObject *field;
    Py_ssize_t len;
    uint64_t seen;  /* hash of the last field that missed here: cached on its second sighting */
    unsigned char bytes[FIELD_CACHE_SPAN];
} CachedField;

static CachedField field_cache[FIELD_CACHE];

static uint64_t
span_hash(const unsigned char *p, Py_ssize_t n)
{
    /* First, middle and last 8 bytes (they overlap for short spans) and the length: the
     * value's end, where fields of one name differ, always takes part. A collision only
     * costs a miss: the bytes are compared in full. */
    uint64_t a = 0, b = 0, c = 0;
    if (n >= 8) {
        memcpy(&a, p, 8);
        memcpy(&b, p + n - 8, 8);
        memcpy(&c, p + (n - 8) / 2, 8);
    } else {
        for (Py_ssize_t i = 0; i < n; i++) a = (a << 8) | p[i];
    }
    uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full)
                 ^ (c * 0x165667B19E3779F9ull) ^ (uint64_t)n;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 29;
    return h;
}

static PyObject *
decode_fields(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end, int depth, int level,
              Py_ssize_t *left)
{
    Collector c;
    c.spill = NULL;
    c.count = 0;
    while (pos < end) {
        if (*left <= 0) goto fail_bad;
        (*left)--;
        Py_ssize_t start = pos;
        Py_ssize_t n = buf[pos++];
        if (pos + n >= end) goto fail_bad;
        int code = buf[pos + n];
        if (code > 17) goto fail_bad;
        Py_ssize_t vpos = pos + n + 1, vend, stop = 0;
        int width = SIZES[code];
        if (width >= 0) {
            vend = vpos + width;
            if (vend > end) goto fail_bad;
        } else {
            if (vpos + 4 > end) goto fail_bad;
            /* Compared unsigned before any addition: a u32 length near 2**32 cannot wrap a
             * 32-bit Py_ssize_t into a negative size. */
            uint32_t length = rd32(buf + vpos);
            if ((uint64_t)length > (uint64_t)(end - vpos - 4)) goto fail_bad;
            stop = vpos + 4 + (Py_ssize_t)length;
            vend = stop;
        }
        CachedField *slot = NULL;
        Py_ssize_t span = vend - start;
        if (span <= FIELD_CACHE_SPAN && code != FT_FRAME && code != FT_ARRAY) {
            uint64_t h = span_hash(buf + start, span);
            slot = &field_cache[h & (FIELD_CACHE - 1)];
            if (slot->field != NULL && slot->len == span
                && memcmp(slot->bytes, buf + start, (size_t)span) == 0) {
                if (collect(&c, Py_NewRef(slot->field)) < 0) goto fail;
                pos = vend;
                continue;
            }
            /* A value seen once (a fresh id, a new amount) does not evict a cached one. */
            if (slot->seen != h) {
                slot->seen = h;
                slot = NULL;
            }
        }
        PyObject *name;
        if (n) {
            name = decode_name(buf + pos, n);
            if (name == NULL) goto fail;
        } else {
            name = Py_NewRef(empty_str);
        }
        PyObject *value;
        if (width >= 0) {
            value = fixed_value(code, buf + vpos);
        } else {
            value = variable_value(code, buf, vpos + 4, stop, depth, level, left);
        }
        pos = vend;
        if (value == NULL) { Py_DECREF(name); goto fail; }
        PyObject *field = new_field(name, code, value);
        if (field == NULL) goto fail;
        if (slot != NULL) {
            Py_XSETREF(slot->field, Py_NewRef(field));
            slot->len = span;
            memcpy(slot->bytes, buf + start, (size_t)span);
        }
        if (collect(&c, field) < 0) goto fail;
    }
    PyObject *list = collected_list(&c);
    if (list == NULL) goto fail;
    return list;
fail_bad:
    bad("malformed frame");
fail:
    collector_clear(&c);
    return NULL;
}

static PyObject *
decode_array(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end, int depth, int level,
             Py_ssize_t *left)
{
    Collector c;
    c.spill = NULL;
    c.count = 0;
    while (pos < end) {
        if (*left <= 0) goto fail_bad;
        (*left)--;
        int code = buf[pos++];
        if (code > 17) goto fail_bad;
        PyObject *value;
        int width = SIZES[code];
        if (width >= 0) {
            if (pos + width > end) goto fail_bad;
            value = fixed_value(code, buf + pos);
            pos += width;
        } else {
            if (pos + 2 > end) goto fail_bad;
            Py_ssize_t length = (Py_ssize_t)rd16(buf + pos);
            pos += 2;
            if (length > end - pos) goto fail_bad;
            Py_ssize_t stop = pos + length;
            value = variable_value(code, buf, pos, stop, depth, level, left);
            pos = stop;
        }
        if (value == NULL) goto fail;
        PyObject *field = new_field(Py_NewRef(empty_str), code, value);
        if (field == NULL || collect(&c, field) < 0) goto fail;
    }
    PyObject *list = collected_list(&c);
    if (list == NULL) goto fail;
    PyObject *tuple = PyList_AsTuple(list);
    Py_DECREF(list);
    return tuple;
fail_bad:
    bad("malformed array");
fail:
    collector_clear(&c);
    return NULL;
}

static Py_ssize_t
limit(PyObject *limits, PyObject *name)
{
    PyObject *value = PyObject_GetAttr(limits, name);
    if (value == NULL) return -1;
    Py_ssize_t n = PyLong_AsSsize_t(value);
    Py_DECREF(value);
    return n;
}

static PyObject *
fast_decode(PyObject *data, PyObject *limits)
{
    /* The frame, or NULL with any exception (the caller then runs the reference). */
    if (field_cls == NULL) return bad("not configured");
    /* Limits is a frozen dataclass: the values of the last one seen are kept with it. */
    static PyObject *last_limits = NULL;
    static Py_ssize_t max_size, max_depth, max_fields;
    if (limits != last_limits) {
        /* Each read checked before the next (no call with an exception set); a value that
         * does not fit a Py_ssize_t raises OverflowError and the reference decides. */
        Py_ssize_t size = limit(limits, s_max_size);
        if (size == -1 && PyErr_Occurred()) return NULL;
        Py_ssize_t depth = limit(limits, s_max_depth);
        if (depth == -1 && PyErr_Occurred()) return NULL;
        Py_ssize_t fields = limit(limits, s_max_fields);
        if (fields == -1 && PyErr_Occurred()) return NULL;
        Py_XSETREF(last_limits, Py_NewRef(limits));
        max_size = size;
        /* Clamped to 0..MAX_DECODE_DEPTH before the cast to int (a huge negative value must
         * not wrap into a positive depth). */
        max_depth = depth > MAX_DECODE_DEPTH ? MAX_DECODE_DEPTH : (depth < 0 ? 0 : depth);
        max_fields = fields;
    }
    Py_ssize_t left = max_fields;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *frame = NULL;
    if (view.len > max_size) {
        bad("max_size");
    } else {
        PyObject *fields = decode_fields((const unsigned char *)view.buf, 0, view.len,
                                         (int)max_depth, 0, &left);
        if (fields != NULL) frame = new_frame(fields);
    }
    PyBuffer_Release(&view);
    return frame;
}

/* ---------------------------------------------------------------------------------------- */
/* Encoding                                                                                  */

#define INLINE_BUFFER 2048

typedef struct {
    char *data;       /* inline, or PyMem memory once the frame outgrows it */
    Py_ssize_t len;
    Py_ssize_t cap;
    char inline_data[INLINE_BUFFER];
} Buffer;

static void
buffer_init(Buffer *b)
{
    b->data = b->inline_data;
    b->len = 0;
    b->cap = INLINE_BUFFER;
}

static void
buffer_free(Buffer *b)
{
    if (b->data != b->inline_data) PyMem_Free(b->data);
}

static int
reserve(Buffer *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap;
    while (cap < b->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *data;
    if (b->data == b->inline_data) {
        data = PyMem_Malloc((size_t)cap);
        if (data != NULL) memcpy(data, b->inline_data, (size_t)b->len);
    } else {
        data = PyMem_Realloc(b->data, (size_t)cap);
    }
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static void put8(Buffer *b, unsigned int v) { b->data[b->len++] = (char)v; }
static void put16(Buffer *b, uint32_t v) { put8(b, v >> 8); put8(b, v); }
static void put32(Buffer *b, uint32_t v) { put16(b, v >> 16); put16(b, v & 0xFFFF); }
static void put64(Buffer *b, uint64_t v) { put32(b, (uint32_t)(v >> 32)); put32(b, (uint32_t)v); }
static void patch32(Buffer *b, Py_ssize_t at, uint32_t v)
{
    b->data[at] = (char)(v >> 24); b->data[at + 1] = (char)(v >> 16);
    b->data[at + 2] = (char)(v >> 8); b->data[at + 3] = (char)v;
}
static void patch16(Buffer *b, Py_ssize_t at, uint32_t v)
{
    b->data[at] = (char)(v >> 8); b->data[at + 1] = (char)v;
}

/* `limit` is the deepest level a frame or array may sit at (the top frame is level 0):
 * MAX_C_LEVELS for a frame (deeper ones go to the reference), message_levels for a message
 * body (deeper ones raise TooDeep: no receiver reads them, Limits.max_depth). */
static int encode_fields(Buffer *b, PyObject *fields, int depth, int limit);
static int encode_array(Buffer *b, PyObject *elements, int depth, int limit);

/* Raised by the message encoders for a body nested deeper than its receivers' max_depth. */
static PyObject *TooDeep = NULL;
/* Limits.max_depth of bus.frame.codec.DEFAULT_LIMITS (set by configure), at most MAX_C_LEVELS. */
static int message_levels = MAX_C_LEVELS;

static int
too_deep(int limit)
{
    if (limit >= MAX_C_LEVELS) bad("deep: left to the reference");
    else PyErr_Format(TooDeep, "nested deeper than max_depth (%d levels)", limit);
    return -1;
}

static int
integer(PyObject *value, int code, Buffer *b)
{
    static const long long lows[] = {-128, 0, -32768, 0, -2147483648LL, 0, INT64_MIN};
    static const long long highs[] = {127, 255, 32767, 65535, 2147483647LL, 4294967295LL, INT64_MAX};
    if (!PyLong_Check(value)) { bad("not an int"); return -1; }
    if (code == FT_U64) {
        unsigned long long u = PyLong_AsUnsignedLongLong(value);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) return -1;
        put64(b, u);
        return 0;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    int k = code - FT_S8;
    if (overflow || v < lows[k] || v > highs[k]) { bad("out of range"); return -1; }
    switch (code) {
    case FT_S8: case FT_U8: put8(b, (unsigned int)(v & 0xFF)); break;
    case FT_S16: case FT_U16: put16(b, (uint32_t)(v & 0xFFFF)); break;
    case FT_S32: case FT_U32: put32(b, (uint32_t)(v & 0xFFFFFFFF)); break;
    default: put64(b, (uint64_t)v); break;
    }
    return 0;
}

/* The bytes of a variable value that is text or bytes; 0 on success. */
static int
flat_payload(PyObject *value, int code, const char **data, Py_ssize_t *size)
{
    if (code == FT_STRING || code == FT_URI) {
        if (!PyUnicode_Check(value)) { bad("not str"); return -1; }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(value) < 0) return -1;
#endif
        if (PyUnicode_KIND(value) != PyUnicode_1BYTE_KIND) { bad("not Latin-1"); return -1; }
        *data = (const char *)PyUnicode_1BYTE_DATA(value);
        *size = PyUnicode_GET_LENGTH(value);
        return 0;
    }
    if (PyBytes_Check(value)) {
        *data = PyBytes_AS_STRING(value);
        *size = PyBytes_GET_SIZE(value);
        return 0;
    }
    if (PyByteArray_Check(value)) {
        *data = PyByteArray_AS_STRING(value);
        *size = PyByteArray_GET_SIZE(value);
        return 0;
    }
    bad("not bytes");
    return -1;
}

/* The value of a field or element of type `code`; `wide` selects u32 (field) or u16 (element)
 * lengths for the variable types. */
static int
encode_value(Buffer *b, int code, PyObject *value, int wide, int depth, int limit)
{
    if (reserve(b, 16) < 0) return -1;
    switch (code) {
    case FT_UDEF: return 0;
    case FT_BOOLEAN: {
        int truth = PyObject_IsTrue(value);
        if (truth < 0) return -1;
        put8(b, (unsigned int)truth);
        return 0;
    }
    case FT_FLOAT:
    case FT_DOUBLE: {
        double d = PyFloat_AsDouble(value);
        if (d == -1.0 && PyErr_Occurred()) return -1;
        int rc = code == FT_FLOAT ? PyFloat_Pack4(d, b->data + b->len, 0)
                                 : PyFloat_Pack8(d, b->data + b->len, 0);
        if (rc < 0) return -1;
        b->len += code == FT_FLOAT ? 4 : 8;
        return 0;
    }
    case FT_DATE: {
        PyObject *ms = PyObject_CallOneArg(millis_from_date, value);
        if (ms == NULL) return -1;
        long long v = PyLong_AsLongLong(ms);
        Py_DECREF(ms);
        if (v == -1 && PyErr_Occurred()) return -1;
        put64(b, (uint64_t)v);
        return 0;
    }
    case FT_FRAME:
    case FT_ARRAY: {
        Py_ssize_t at = b->len;
        b->len += wide ? 4 : 2;
        int rc;
        if (code == FT_FRAME) {
            if (!PyObject_TypeCheck(value, frame_cls)) { bad("not a DataFrame"); return -1; }
            PyObject *fields = frame_fields(value);
            if (fields == NULL) { bad("frame without fields"); return -1; }
            Py_INCREF(fields);
            rc = encode_fields(b, fields, depth + 1, limit);
            Py_DECREF(fields);
        } else {
            rc = encode_array(b, value, depth + 1, limit);
        }
        if (rc < 0) return -1;
        Py_ssize_t size = b->len - at - (wide ? 4 : 2);
        if (size > (wide ? (Py_ssize_t)0xFFFFFFFF : 0xFFFF)) { bad("too long"); return -1; }
        if (wide) patch32(b, at, (uint32_t)size); else patch16(b, at, (uint32_t)size);
        return 0;
    }
    case FT_STRING:
    case FT_URI:
    case FT_BYTES: {
        const char *data;
        Py_ssize_t size;
        if (flat_payload(value, code, &data, &size) < 0) return -1;
        if (size > (wide ? (Py_ssize_t)0xFFFFFFFF : 0xFFFF)) { bad("too long"); return -1; }
        if (reserve(b, size + 4) < 0) return -1;
        if (wide) put32(b, (uint32_t)size); else put16(b, (uint32_t)size);
        memcpy(b->data + b->len, data, (size_t)size);
        b->len += size;
        return 0;
    }
    default:
        return integer(value, code, b);
    }
}

static int
field_parts(PyObject *item, PyObject **name, int *code, PyObject **value)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) { bad("not a Field"); return -1; }
    *name = PyTuple_GET_ITEM(item, 0);
    PyObject *type = PyTuple_GET_ITEM(item, 1);
    *value = PyTuple_GET_ITEM(item, 2);
    if (!PyLong_Check(type)) { bad("type is not a FieldType"); return -1; }
    long c = PyLong_AsLong(type);
    if (c < 0 || c > 17) { if (!PyErr_Occurred()) bad("unknown type"); return -1; }
    /* The FieldType member itself, as the reference requires (not a plain int). */
    if (PyTuple_GET_ITEM(types, c) != type) { bad("type is not a FieldType"); return -1; }
    *code = (int)c;
    return 0;
}

static int
encode_fields(Buffer *b, PyObject *fields, int depth, int limit)
{
    if (depth > limit) return too_deep(limit);
    if (!PyList_Check(fields) && !PyTuple_Check(fields)) { bad("fields not a list"); return -1; }
    /* The size is read again each turn and each item held while in use: converting a value
     * may run Python code (__bool__, __float__) that changes the list. */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fields); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fields, i);
        PyObject *name, *value;
        int code;
        Py_INCREF(item);
        if (field_parts(item, &name, &code, &value) < 0) goto fail;
        if (!PyUnicode_Check(name)) { bad("name not str"); goto fail; }
        Py_ssize_t n;
        const char *utf8 = PyUnicode_AsUTF8AndSize(name, &n);
        if (utf8 == NULL) goto fail;
        if (n > 255) { bad("name too long"); goto fail; }
        if (reserve(b, n + 2) < 0) goto fail;
        put8(b, (unsigned int)n);
        memcpy(b->data + b->len, utf8, (size_t)n);
        b->len += n;
        put8(b, (unsigned int)code);
        if (encode_value(b, code, value, 1, depth, limit) < 0) goto fail;
        Py_DECREF(item);
        continue;
    fail:
        Py_DECREF(item);
        return -1;
    }
    return 0;
}

static int
encode_array(Buffer *b, PyObject *elements, int depth, int limit)
{
    if (depth > limit) return too_deep(limit);
    if (!PyList_Check(elements) && !PyTuple_Check(elements)) { bad("array not a tuple"); return -1; }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(elements); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(elements, i);
        PyObject *name, *value;
        int code;
        Py_INCREF(item);
        if (field_parts(item, &name, &code, &value) < 0 || reserve(b, 1) < 0) goto fail;
        put8(b, (unsigned int)code);
        if (encode_value(b, code, value, 0, depth, limit) < 0) goto fail;
        Py_DECREF(item);
        continue;
    fail:
        Py_DECREF(item);
        return -1;
    }
    return 0;
}

static PyObject *
fast_encode(PyObject *frame, int limit)
{
    /* The bytes, or NULL with any exception (the caller then runs the reference). */
    if (field_cls == NULL) return bad("not configured");
    if (!PyObject_TypeCheck(frame, frame_cls)) return bad("not a DataFrame");
    PyObject *fields = frame_fields(frame);
    if (fields == NULL) return bad("frame without fields");
    Buffer b;
    buffer_init(&b);
    Py_INCREF(fields);
    int rc = encode_fields(&b, fields, 0, limit);
    Py_DECREF(fields);
    PyObject *result = rc < 0 ? NULL : PyBytes_FromStringAndSize(b.data, b.len);
    buffer_free(&b);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* The module's functions: the fast path, else the pure-Python reference of bus/frame/codec.py      */

static int enabled = 1;
static PyObject *reference_encode = NULL;  /* bus.frame.codec._reference_encode */
static PyObject *reference_decode = NULL;  /* bus.frame.codec._reference_decode */
static PyObject *default_limits = NULL;    /* bus.frame.codec.DEFAULT_LIMITS */

static int
fall_back(void)
{
    /* After a failed fast path: 1 to run the reference, 0 to let the exception through
     * (KeyboardInterrupt, SystemExit: not ours to swallow). */
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return 0;
    PyErr_Clear();
    return 1;
}

static PyObject *
speedups_encode(PyObject *module, PyObject *frame)
{
    if (enabled && reference_encode != NULL) {
        PyObject *result = fast_encode(frame, MAX_C_LEVELS);
        if (result != NULL || !fall_back()) return result;
    }
    if (reference_encode == NULL) return bad("not configured");
    return PyObject_CallOneArg(reference_encode, frame);
}

static PyObject *
speedups_decode(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *data = nargs > 0 ? args[0] : NULL;
    PyObject *limits = nargs > 1 ? args[1] : NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        PyObject **slot = NULL;
        if (PyUnicode_CompareWithASCIIString(key, "data") == 0) slot = &data;
        else if (PyUnicode_CompareWithASCIIString(key, "limits") == 0) slot = &limits;
        if (slot == NULL || *slot != NULL) {
            PyErr_Format(PyExc_TypeError, "decode() got an unexpected or repeated argument %R", key);
            return NULL;
        }
        *slot = args[nargs + i];
    }
    if (data == NULL || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "decode() takes data and an optional limits");
        return NULL;
    }
    if (limits == NULL) limits = default_limits;
    if (limits == NULL) return bad("not configured");
    if (enabled) {
        PyObject *frame = fast_decode(data, limits);
        if (frame != NULL || !fall_back()) return frame;
    }
    if (reference_decode == NULL) return bad("not configured");
    PyObject *call[2] = {data, limits};
    return PyObject_Vectorcall(reference_decode, call, 2, NULL);
}

static PyObject *
speedups_fast_encode(PyObject *module, PyObject *frame)
{
    return fast_encode(frame, MAX_C_LEVELS);
}

static PyObject *
speedups_encode_body(PyObject *module, PyObject *frame)
{
    if (!enabled) return bad("the fast path is off");
    return fast_encode(frame, message_levels);
}

static PyObject *
speedups_fast_decode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) return bad("fast_decode(data, limits)");
    return fast_decode(args[0], args[1]);
}

static PyObject *
speedups_find_name(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    /* find_name(fields: list[Field], name) -> index of the first field named name, or -1 */
    if (nargs != 2 || !PyList_Check(args[0])) return bad("find_name(fields, name)");
    PyObject *fields = args[0], *name = args[1];
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(fields); i++) {
        PyObject *item = PyList_GET_ITEM(fields, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1) return bad("not a Field");
        PyObject *key = PyTuple_GET_ITEM(item, 0);
        if (key == name) return PyLong_FromSsize_t(i);
        Py_INCREF(item);
        int equal = PyObject_RichCompareBool(key, name, Py_EQ);
        Py_DECREF(item);
        if (equal < 0) return NULL;
        if (equal) return PyLong_FromSsize_t(i);
    }
    return PyLong_FromLong(-1);
}

static PyObject *
speedups_set_enabled(PyObject *module, PyObject *flag)
{
    int truth = PyObject_IsTrue(flag);
    if (truth < 0) return NULL;
    enabled = truth;
    return PyBool_FromLong(enabled);
}

static PyObject *
speedups_configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 || !PyType_Check(args[0]) || !PyTuple_Check(args[1])
        || PyTuple_GET_SIZE(args[1]) != 18 || !PyType_Check(args[2])) {
        return bad("configure(Field, types, DataFrame, date_from_millis, millis_from_date, "
                   "reference_encode, reference_decode, default_limits)");
    }
#if PY_VERSION_HEX >= 0x030E0000 || defined(Py_GIL_DISABLED)
    /* new_field() builds Field objects with the tuple layout of CPython 3.11 to 3.13 (3.14
     * caches a tuple's hash in the object), and the caches rely on the GIL; elsewhere the
     * pure-Python codec runs. */
    return bad("the accelerator is validated on CPython 3.11 to 3.13 with the GIL only");
#endif
    PyTypeObject *cls = (PyTypeObject *)args[0];
    if (!PyType_IsSubtype(cls, &PyTuple_Type) || !(cls->tp_flags & Py_TPFLAGS_HEAPTYPE)
        || cls->tp_dictoffset != 0 || cls->tp_weaklistoffset != 0 || cls->tp_finalize != NULL
        || cls->tp_del != NULL || cls->tp_basicsize != PyTuple_Type.tp_basicsize) {
        return bad("Field must be a plain tuple subclass (a NamedTuple)");
    }
    PyObject *slot = PyObject_GetAttrString(args[2], "_fields");
    if (slot == NULL) return NULL;
    int is_slot = Py_IS_TYPE(slot, &PyMemberDescr_Type)
                  && ((PyMemberDescrObject *)slot)->d_member->type == T_OBJECT_EX;
    Py_ssize_t offset = is_slot ? ((PyMemberDescrObject *)slot)->d_member->offset : -1;
    Py_DECREF(slot);
    if (!is_slot) return bad("DataFrame._fields must be a __slots__ member");
    fields_offset = offset;
    Py_XSETREF(field_cls, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(types, Py_NewRef(args[1]));
    Py_XSETREF(frame_cls, (PyTypeObject *)Py_NewRef(args[2]));
    Py_XSETREF(date_from_millis, Py_NewRef(args[3]));
    Py_XSETREF(millis_from_date, Py_NewRef(args[4]));
    Py_XSETREF(reference_encode, Py_NewRef(args[5]));
    Py_XSETREF(reference_decode, Py_NewRef(args[6]));
    Py_XSETREF(default_limits, Py_NewRef(args[7]));
    Py_ssize_t depth = limit(default_limits, s_max_depth);
    if (depth == -1 && PyErr_Occurred()) return NULL;
    message_levels = depth < 0 ? 0 : (depth > MAX_C_LEVELS ? MAX_C_LEVELS : (int)depth);
    Py_RETURN_NONE;
}

/* The type make_field infers for a plain value (bus.frame.frame.infer_type): None, bool, an int of
 * up to 64 bits, float, Latin-1 str, bytes; -1 (no exception set) for anything else. */
static int
plain_code(PyObject *value)
{
    if (value == Py_None) return FT_UDEF;
    if (PyBool_Check(value)) return FT_BOOLEAN;
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return -1;
        }
        return (v >= 0 && v <= 0xFFFFFFFFLL) ? FT_U32 : FT_S64;  /* U32 when it fits */
    }
    if (PyFloat_CheckExact(value)) return FT_DOUBLE;
    if (PyUnicode_CheckExact(value) && PyUnicode_KIND(value) == PyUnicode_1BYTE_KIND) {
        return FT_STRING;  /* every character in Latin-1 */
    }
    if (PyBytes_CheckExact(value)) return FT_BYTES;
    return -1;
}

/* A field name make_field takes as it is: ASCII text of up to 255 characters. */
static int
plain_name(PyObject *name)
{
    return PyUnicode_CheckExact(name) && PyUnicode_IS_ASCII(name)
           && PyUnicode_GET_LENGTH(name) <= 255;
}

/* make_field(name, value, type=None): the checked Field of a plain value, as
 * bus.frame.frame._make_field_reference builds it, for the values every message is made of (an ASCII
 * name of up to 255 bytes; None, bool, int of up to 64 bits, float, Latin-1 str, bytes). Any
 * other call (an explicit type, another kind of value, a long or non-ASCII name) goes to the
 * reference, which infers, normalises and raises the documented EncodeError. */
static PyObject *reference_make_field = NULL;

static PyObject *
speedups_make_field(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3) return bad("make_field(name, value, type=None)");
    PyObject *name = args[0], *value = args[1];
    if (field_cls == NULL || reference_make_field == NULL || !enabled) goto reference;
    if ((nargs == 3 && args[2] != Py_None) || !plain_name(name)) goto reference;
    int code = plain_code(value);
    if (code < 0) goto reference;
    return new_field(Py_NewRef(name), code, Py_NewRef(value));
reference:
    if (reference_make_field == NULL) return bad("not configured");
    return PyObject_Vectorcall(reference_make_field, args, nargs, NULL);
}

/* encode_event(mid, type, payload) -> bytes: the body of Message.event(type, payload) with this
 * MID, written straight from its parts (bus.message.message.encode_event: the publish fast path). It
 * takes ASCII mid and type and a payload that is None (no PLD), a DataFrame, or a dict of plain
 * values under ASCII names (what make_field above takes); anything else raises, and the caller
 * runs the reference, which builds the message and encodes it. */
static int
put_field_head(Buffer *b, const char *name, int code)
{
    if (reserve(b, 5) < 0) return -1;
    put8(b, 3);
    memcpy(b->data + b->len, name, 3);
    b->len += 3;
    put8(b, (unsigned int)code);
    return 0;
}

static int
put_ascii_field(Buffer *b, const char *name, PyObject *text)
{
    if (!PyUnicode_CheckExact(text) || !PyUnicode_IS_ASCII(text)) { bad("not ASCII text"); return -1; }
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    if (put_field_head(b, name, FT_STRING) < 0 || reserve(b, size + 4) < 0) return -1;
    put32(b, (uint32_t)size);
    memcpy(b->data + b->len, PyUnicode_1BYTE_DATA(text), (size_t)size);
    b->len += size;
    return 0;
}

static int
encode_plain_dict(Buffer *b, PyObject *payload)
{
    /* The fields DataFrame(payload) would hold, each as make_field builds it. A plain value's
     * conversion runs no Python code, so the dict cannot change while it is read. */
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(payload, &pos, &name, &value)) {
        int code = plain_code(value);
        if (code < 0 || !plain_name(name)) { bad("not a plain field"); return -1; }
        Py_ssize_t n = PyUnicode_GET_LENGTH(name);
        if (reserve(b, n + 2) < 0) return -1;
        put8(b, (unsigned int)n);
        memcpy(b->data + b->len, PyUnicode_1BYTE_DATA(name), (size_t)n);
        b->len += n;
        put8(b, (unsigned int)code);
        if (encode_value(b, code, value, 1, 1, message_levels) < 0) return -1;
    }
    return 0;
}

/* The PLD field of a payload that is a dict of plain values or a DataFrame. */
static int
put_payload(Buffer *b, PyObject *payload)
{
    if (put_field_head(b, "PLD", FT_FRAME) < 0 || reserve(b, 4) < 0) return -1;
    Py_ssize_t at = b->len;
    b->len += 4;
    int rc;
    if (PyDict_CheckExact(payload)) {
        rc = encode_plain_dict(b, payload);
    } else if (PyObject_TypeCheck(payload, frame_cls) && frame_fields(payload) != NULL) {
        PyObject *fields = frame_fields(payload);
        Py_INCREF(fields);
        rc = encode_fields(b, fields, 1, message_levels);
        Py_DECREF(fields);
    } else {
        bad("payload not a dict or a DataFrame");
        rc = -1;
    }
    if (rc < 0) return -1;
    Py_ssize_t size = b->len - at - 4;
    if (size > (Py_ssize_t)0xFFFFFFFF) { bad("too long"); return -1; }
    patch32(b, at, (uint32_t)size);
    return 0;
}

/* The body so far, with the payload's PLD field when there is one, as bytes; the buffer is
 * freed either way. */
static PyObject *
finish_body(Buffer *b, PyObject *payload)
{
    PyObject *result = NULL;
    if (payload == Py_None || put_payload(b, payload) == 0)
        result = PyBytes_FromStringAndSize(b->data, b->len);
    buffer_free(b);
    return result;
}

static PyObject *
speedups_encode_event(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) return bad("encode_event(mid, type, payload)");
    if (!enabled || field_cls == NULL) return bad("the fast path is off");
    PyObject *payload = args[2];
    Buffer b;
    buffer_init(&b);
    if (put_ascii_field(&b, "MID", args[0]) < 0 || put_ascii_field(&b, "GRP", args[1]) < 0
        || put_field_head(&b, "TYP", FT_STRING) < 0 || reserve(&b, 7) < 0) goto fail;
    put32(&b, 3);
    memcpy(b.data + b.len, "EVT", 3);
    b.len += 3;
    return finish_body(&b, payload);
fail:
    buffer_free(&b);
    return NULL;
}

/* The (name, text) pairs of a tuple, as STRING fields: names of three ASCII characters, ASCII
 * texts. */
static int
put_texts(Buffer *b, PyObject *texts)
{
    if (!PyTuple_CheckExact(texts) || PyTuple_GET_SIZE(texts) % 2) {
        bad("texts: a tuple of names and texts");
        return -1;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(texts); k += 2) {
        PyObject *name = PyTuple_GET_ITEM(texts, k);
        if (!PyUnicode_CheckExact(name) || !PyUnicode_IS_ASCII(name)
            || PyUnicode_GET_LENGTH(name) != 3) {
            bad("not a header name");
            return -1;
        }
        if (put_ascii_field(b, (const char *)PyUnicode_1BYTE_DATA(name),
                            PyTuple_GET_ITEM(texts, k + 1)) < 0) return -1;
    }
    return 0;
}

/* encode_texts(texts, payload, after=()) -> bytes: a message body of header texts, a payload
 * and more header texts, as the encoder writes DataFrame([(name, STRING, text), ...,
 * ("PLD", FRAME, payload), (name, STRING, text), ...]): ``texts`` and ``after`` are tuples of
 * names (three ASCII characters) and ASCII texts in turn, the payload None (no PLD), a dict of
 * plain values or a DataFrame, as for encode_event. A request writes its header before PLD; an
 * answer (Message.reply's binary lane) writes SRC and TRC after it, in Kestrel's order.
 * Anything else raises, and the caller builds the message the reference way. */
static PyObject *
speedups_encode_texts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 && nargs != 3) return bad("encode_texts(texts, payload, after=())");
    if (!enabled || field_cls == NULL) return bad("the fast path is off");
    PyObject *payload = args[1];
    Buffer b;
    buffer_init(&b);
    if (put_texts(&b, args[0]) < 0) goto fail;
    if (nargs == 3) {
        if (payload != Py_None && put_payload(&b, payload) < 0) goto fail;
        if (put_texts(&b, args[2]) < 0) goto fail;
        return finish_body(&b, Py_None);
    }
    return finish_body(&b, payload);
fail:
    buffer_free(&b);
    return NULL;
}

static PyObject *
speedups_set_make_field(PyObject *module, PyObject *reference)
{
    Py_XSETREF(reference_make_field, Py_NewRef(reference));
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------- */
/* A frame as plain data (bus.frame.frame.DataFrame.to_dict, whose Python body is the reference)   */

static PyObject *plain_of_frame(PyObject *frame, int depth);

static int
is_field(PyObject *item)
{
    return Py_IS_TYPE(item, field_cls) && PyTuple_GET_SIZE(item) == 3 &&
           PyUnicode_Check(PyTuple_GET_ITEM(item, 0));
}

static PyObject *
plain_of_field(PyObject *field, int depth)
{
    PyObject *type = PyTuple_GET_ITEM(field, 1), *value = PyTuple_GET_ITEM(field, 2);
    if (type == PyTuple_GET_ITEM(types, FT_FRAME)) return plain_of_frame(value, depth + 1);
    if (type != PyTuple_GET_ITEM(types, FT_ARRAY)) return Py_NewRef(value);
    if (!PyList_Check(value) && !PyTuple_Check(value)) goto unusual;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *element = PySequence_Fast_GET_ITEM(value, i);
        PyObject *plain = is_field(element) ? plain_of_field(element, depth + 1) : NULL;
        if (plain == NULL) {
            Py_DECREF(list);
            if (!PyErr_Occurred()) goto unusual;
            return NULL;
        }
        PyList_SET_ITEM(list, i, plain);
    }
    return list;
unusual:
    PyErr_SetString(PyExc_TypeError, "to_plain: an unusual frame (ask the reference)");
    return NULL;
}

static PyObject *
plain_of_frame(PyObject *frame, int depth)
{
    PyObject *fields = PyObject_TypeCheck(frame, frame_cls) ? frame_fields(frame) : NULL;
    if (depth > 1000 || fields == NULL || !PyList_CheckExact(fields)) {
        PyErr_SetString(PyExc_TypeError, "to_plain: an unusual frame (ask the reference)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(fields);
    int array = n > 0;  /* every field unnamed: a JSON array (PROTOCOL.md 1.6) */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(fields, i);
        if (!is_field(item)) {
            PyErr_SetString(PyExc_TypeError, "to_plain: an unusual frame (ask the reference)");
            return NULL;
        }
        if (PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(item, 0)) != 0) array = 0;
    }
    if (array) {
        PyObject *list = PyList_New(n);
        if (list == NULL) return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *plain = plain_of_field(PyList_GET_ITEM(fields, i), depth);
            if (plain == NULL) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, i, plain);
        }
        return list;
    }
    PyObject *dict = PyDict_New();
    if (dict == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(fields); i++) {
        PyObject *item = PyList_GET_ITEM(fields, i);
        PyObject *name = PyTuple_GET_ITEM(item, 0);
        int seen = PyDict_Contains(dict, name);  /* the first field of a repeated name wins */
        if (seen) {
            if (seen < 0) goto fail;
            continue;
        }
        PyObject *plain = plain_of_field(item, depth);
        if (plain == NULL) goto fail;
        int failed = PyDict_SetItem(dict, name, plain);
        Py_DECREF(plain);
        if (failed < 0) goto fail;
    }
    return dict;
fail:
    Py_DECREF(dict);
    return NULL;
}

static PyObject *
speedups_to_plain(PyObject *module, PyObject *frame)
{
    if (field_cls == NULL || types == NULL) {
        PyErr_SetString(PyExc_TypeError, "to_plain: not configured (ask the reference)");
        return NULL;
    }
    return plain_of_frame(frame, 0);
}

PyDoc_STRVAR(encode_doc,
"encode(frame)\n--\n\n"
"Encode a frame to its binary form (PROTOCOL.md 1.1).\n\n"
"Args:\n    frame: the frame.\n\n"
"Returns:\n    The fields' bytes, concatenated (an empty frame is b'').\n\n"
"Raises:\n    EncodeError: a field cannot be encoded (a value out of range for its type, text\n"
"        outside Latin-1, a value longer than its length field, a frame nested too deeply).\n\n"
"C accelerator: on anything unusual it runs the pure-Python reference, which raises.");

PyDoc_STRVAR(decode_doc,
"decode(data, limits=DEFAULT_LIMITS)\n--\n\n"
"Decode a whole input as one frame (PROTOCOL.md 1.5).\n\n"
"A frame has no end marker, so every byte of data belongs to it: bytes after the last\n"
"complete field are read as another field, and raise DecodeError if they do not form one.\n\n"
"Args:\n    data: the frame's bytes (any bytes-like object).\n"
"    limits: size, depth and field-count limits.\n\n"
"Returns:\n    The frame.\n\n"
"Raises:\n    DecodeError: the bytes are not a valid frame or exceed a limit; .offset is where.\n\n"
"C accelerator: on anything unusual it runs the pure-Python reference, which raises.");

static PyMethodDef methods[] = {
    {"encode", (PyCFunction)speedups_encode, METH_O, encode_doc},
    {"decode", (PyCFunction)(void (*)(void))speedups_decode, METH_FASTCALL | METH_KEYWORDS,
     decode_doc},
    {"fast_encode", (PyCFunction)speedups_fast_encode, METH_O,
     "fast_encode(frame) -> bytes: the C path only; any exception means 'ask the reference'."},
    {"fast_decode", (PyCFunction)(void (*)(void))speedups_fast_decode, METH_FASTCALL,
     "fast_decode(data, limits) -> DataFrame: the C path only (for tests)."},
    {"to_plain", (PyCFunction)speedups_to_plain, METH_O,
     "to_plain(frame) -> dict | list: DataFrame.to_dict; TypeError means 'ask the reference'."},
    {"find_name", (PyCFunction)(void (*)(void))speedups_find_name, METH_FASTCALL,
     "find_name(fields, name) -> int: index of the first field named name, or -1."},
    {"make_field", (PyCFunction)(void (*)(void))speedups_make_field, METH_FASTCALL,
     "make_field(name, value, type=None) -> Field: bus.frame.frame.make_field for plain values."},
    {"encode_body", (PyCFunction)speedups_encode_body, METH_O,
     "encode_body(frame) -> bytes: a message body by the C path only; TooDeep when it is nested "
     "deeper than the default Limits.max_depth (its receivers refuse it), any other exception "
     "means 'ask the reference'."},
    {"encode_event", (PyCFunction)(void (*)(void))speedups_encode_event, METH_FASTCALL,
     "encode_event(mid, type, payload) -> bytes: the body of an event from its parts; any "
     "exception means 'ask the reference'."},
    {"encode_texts", (PyCFunction)(void (*)(void))speedups_encode_texts, METH_FASTCALL,
     "encode_texts(texts, payload, after=()) -> bytes: a body of header texts (name, text, ...), "
     "a payload and the texts after it; any exception means 'ask the reference'."},
    {"set_make_field", (PyCFunction)speedups_set_make_field, METH_O,
     "set_make_field(reference): the reference make_field that unusual calls go to."},
    {"set_enabled", (PyCFunction)speedups_set_enabled, METH_O,
     "set_enabled(flag) -> bool: use the C path (True) or only the reference (False)."},
    {"configure", (PyCFunction)(void (*)(void))speedups_configure, METH_FASTCALL,
     "configure(Field, types, DataFrame, date_from_millis, millis_from_date, "
     "reference_encode, reference_decode, default_limits)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "bus.native._speedups",
    "C accelerator of the data-frame codec; bus.frame.codec is the interface and the reference.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    empty_str = PyUnicode_FromString("");
    s_max_size = PyUnicode_InternFromString("max_size");
    s_max_depth = PyUnicode_InternFromString("max_depth");
    s_max_fields = PyUnicode_InternFromString("max_fields");
    if (empty_str == NULL || s_max_size == NULL || s_max_depth == NULL || s_max_fields == NULL) {
        return NULL;
    }
    TooDeep = PyErr_NewExceptionWithDoc(
        "bus.native._speedups.TooDeep",
        "A message body nested deeper than the default Limits.max_depth (encode_body, "
        "encode_event, encode_texts): its receivers would refuse it.",
        PyExc_ValueError, NULL);
    if (TooDeep == NULL) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "TooDeep", TooDeep) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
