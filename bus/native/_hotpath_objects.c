/*
 * The Object System's content lane, part of the bus.native._hotpath accelerator (docs/PROTOCOL.md 6.2,
 * 6.4; bus/objects/content_lane.py drives it). Its reference is the pure-Python path it stands
 * in for: ObjectDecoder.next_events (bus/objects/codec.py) and the short path of
 * Router.receive_batch (bus/objects/router.py).
 *
 * content_run(buffer, start, limit, max_metadata, max_payload, sender_id, own_id, prefix,
 *             next_id) -> (items, end)
 *     The client's content objects at the front of buffer[start:], at most limit of them:
 *     each one read (JSON metadata, NUL, size payload bytes) and rewritten as the router
 *     forwards it, its "route" [sender_id, own_id] added and, when it has none (or null), an
 *     "id" prefix + str(next_id()). Each item is (metadata, payload, data, type, to): the new
 *     metadata as a dict, the payload, the object's bytes as the router writes them
 *     (orjson.dumps of that metadata, NUL, payload) and the metadata's "type" and "to" (None
 *     when absent or null). end is where the first object not taken starts.
 *
 *     It stops, taking nothing of it, at the first object it cannot vouch for, and the
 *     reference takes that one (and raises the documented errors): an incomplete object; JSON
 *     it does not read (an escape in a string, a float, a number over 18 digits, a repeated
 *     name, nesting deeper than MAX_DEPTH, anything orjson would refuse); metadata that is not
 *     a plain content object (an "event", "route" or "natures" member, an "id" that is not a
 *     non-empty string or null, a "type" or "to" that is not a string or null, a "size" that
 *     is not null or a count from 1 to max_payload); or a sender or server id that JSON must
 *     escape (then nothing at all is taken). What it writes is what orjson.dumps writes for
 *     the same metadata: compact, the members in their order, each string as it came (no
 *     escapes were in it), each integer in its shortest form.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* Nesting of arrays and objects the lane reads; deeper metadata goes to the reference. */
#define MAX_DEPTH 32
/* Digits of an integer the lane reads (below 2**63 whatever they are). */
#define MAX_DIGITS 18

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Out;

/* Parse results: a value, "not for the lane" (no Python error set), or a Python error. */
enum { TAKEN = 0, DECLINED = 1, FAILED = -1 };

static int
out_put(Out *out, const void *src, Py_ssize_t n)
{
    if (out->len + n > out->cap) {
        Py_ssize_t cap = out->cap ? out->cap : 256;
        while (cap < out->len + n) cap *= 2;
        char *grown = PyMem_Realloc(out->data, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        out->data = grown;
        out->cap = cap;
    }
    memcpy(out->data + out->len, src, (size_t)n);
    out->len += n;
    return 0;
}

static const unsigned char *
skip_space(const unsigned char *p, const unsigned char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* A string at p (at its opening quote) without escapes or control characters: its text (the
 * bytes must be UTF-8, as orjson requires) and the raw bytes, quotes included, copied to out. */
static int
read_string(const unsigned char **at, const unsigned char *end, Out *out, PyObject **value)
{
    const unsigned char *p = *at + 1, *first = p;
    int ascii = 1;
    while (p < end && *p != '"') {
        if (*p < 0x20 || *p == '\\') return DECLINED;
        if (*p >= 0x80) ascii = 0;
        p++;
    }
    if (p >= end) return DECLINED;
    Py_ssize_t n = p - first;
    PyObject *text = ascii ? PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, first, n)
                           : PyUnicode_DecodeUTF8((const char *)first, n, NULL);
    if (text == NULL) {
        if (ascii || !PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return FAILED;
        PyErr_Clear();
        return DECLINED; /* not UTF-8 (or a surrogate): orjson refuses it, the reference says so */
    }
    if (out_put(out, *at, n + 2) < 0) {
        Py_DECREF(text);
        return FAILED;
    }
    *value = text;
    *at = p + 1;
    return TAKEN;
}

static int read_value(const unsigned char **at, const unsigned char *end, int depth, Out *out,
                      PyObject **value);

static PyObject *S_event, *S_route, *S_natures, *S_id, *S_type, *S_to, *S_size;

/* Member names seen before, as texts: metadata repeats the same few names, and a name made
 * once has its hash computed once (KEY_CACHE of them, the first ones seen, kept for good). */
#define KEY_CACHE 64
#define KEY_MAX 32
static PyObject *keys[KEY_CACHE];
static int key_count;

static PyObject *
cached_key(const unsigned char *name, Py_ssize_t n)
{
    for (int k = 0; k < key_count; k++) {
        PyObject *key = keys[k];
        if (PyUnicode_GET_LENGTH(key) == n && memcmp(PyUnicode_1BYTE_DATA(key), name, (size_t)n) == 0)
            return Py_NewRef(key);
    }
    PyObject *key = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, name, n);
    if (key != NULL && key_count < KEY_CACHE) {
        PyUnicode_InternInPlace(&key);
        keys[key_count++] = Py_NewRef(key);
    }
    return key;
}

/* A member name (at its opening quote) as read_string reads a string, from the cache when it
 * is a short ASCII one. */
static int
read_name(const unsigned char **at, const unsigned char *end, Out *out, PyObject **value)
{
    const unsigned char *p = *at + 1, *first = p;
    while (p < end && *p != '"') {
        if (*p < 0x20 || *p == '\\' || *p >= 0x80 || p - first >= KEY_MAX)
            return read_string(at, end, out, value);
        p++;
    }
    if (p >= end) return DECLINED;
    Py_ssize_t n = p - first;
    PyObject *key = cached_key(first, n);
    if (key == NULL) return FAILED;
    if (out_put(out, *at, n + 2) < 0) {
        Py_DECREF(key);
        return FAILED;
    }
    *value = key;
    *at = p + 1;
    return TAKEN;
}

static int
read_integer(const unsigned char **at, const unsigned char *end, Out *out, PyObject **value)
{
    const unsigned char *p = *at, *first = p;
    int negative = 0;
    if (*p == '-') {
        negative = 1;
        p++;
    }
    const unsigned char *digits = p;
    long long number = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        number = number * 10 + (*p - '0');
        p++;
        if (p - digits > MAX_DIGITS) return DECLINED;
    }
    Py_ssize_t count = p - digits;
    if (count == 0) return DECLINED;
    if (*digits == '0' && (count > 1 || negative)) return DECLINED; /* 01: invalid; -0: is 0 */
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return DECLINED; /* a float */
    PyObject *integer = PyLong_FromLongLong(negative ? -number : number);
    if (integer == NULL) return FAILED;
    if (out_put(out, first, p - first) < 0) {
        Py_DECREF(integer);
        return FAILED;
    }
    *value = integer;
    *at = p;
    return TAKEN;
}

static int
read_literal(const unsigned char **at, const unsigned char *end, Out *out, PyObject **value)
{
    static const struct { const char *text; Py_ssize_t len; } words[] = {
        {"true", 4}, {"false", 5}, {"null", 4}};
    PyObject *objects[] = {Py_True, Py_False, Py_None};
    for (int k = 0; k < 3; k++) {
        Py_ssize_t n = words[k].len;
        if (end - *at >= n && memcmp(*at, words[k].text, (size_t)n) == 0) {
            if (out_put(out, words[k].text, n) < 0) return FAILED;
            *value = Py_NewRef(objects[k]);
            *at += n;
            return TAKEN;
        }
    }
    return DECLINED;
}

static int
read_array(const unsigned char **at, const unsigned char *end, int depth, Out *out,
           PyObject **value)
{
    const unsigned char *p = skip_space(*at + 1, end);
    PyObject *list = PyList_New(0);
    if (list == NULL || out_put(out, "[", 1) < 0) goto failed;
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            PyObject *item = NULL;
            int rc = read_value(&p, end, depth, out, &item);
            if (rc != TAKEN) {
                Py_XDECREF(list);
                return rc;
            }
            rc = PyList_Append(list, item);
            Py_DECREF(item);
            if (rc < 0) goto failed;
            p = skip_space(p, end);
            if (p < end && *p == ']') {
                p++;
                break;
            }
            if (p >= end || *p != ',') {
                Py_DECREF(list);
                return DECLINED;
            }
            if (out_put(out, ",", 1) < 0) goto failed;
            p = skip_space(p + 1, end);
        }
    }
    if (out_put(out, "]", 1) < 0) goto failed;
    *value = list;
    *at = p;
    return TAKEN;
failed:
    Py_XDECREF(list);
    return FAILED;
}

/* The top-level members the lane looks at (borrowed from the metadata; NULL: absent), found
 * as the names are read (they come from the key cache, so a name is its interned text), and
 * where the value of "id" is in the output when it is null (-1: elsewhere). */
typedef struct {
    Py_ssize_t null_at;
    int other; /* an "event", "route" or "natures" member */
    PyObject *type, *to, *id, *size;
} IdSpot;

static int
read_object(const unsigned char **at, const unsigned char *end, int depth, Out *out,
            PyObject **value, IdSpot *spot)
{
    const unsigned char *p = skip_space(*at + 1, end);
    Py_ssize_t members = 0;
    PyObject *dict = PyDict_New();
    if (dict == NULL || out_put(out, "{", 1) < 0) goto failed;
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            if (p >= end || *p != '"') goto declined;
            PyObject *name = NULL, *item = NULL;
            int rc = read_name(&p, end, out, &name);
            if (rc != TAKEN) {
                Py_DECREF(dict);
                return rc;
            }
            p = skip_space(p, end);
            if (p >= end || *p != ':' || out_put(out, ":", 1) < 0) {
                Py_DECREF(name);
                if (PyErr_Occurred()) goto failed;
                goto declined;
            }
            p = skip_space(p + 1, end);
            Py_ssize_t value_at = out->len;
            rc = read_value(&p, end, depth, out, &item);
            if (rc != TAKEN) {
                Py_DECREF(name);
                Py_DECREF(dict);
                return rc;
            }
            if (spot != NULL) {
                if (name == S_id) {
                    spot->id = item;
                    if (item == Py_None) spot->null_at = value_at;
                } else if (name == S_type) {
                    spot->type = item;
                } else if (name == S_to) {
                    spot->to = item;
                } else if (name == S_size) {
                    spot->size = item;
                } else if (name == S_event || name == S_route || name == S_natures) {
                    spot->other = 1;
                }
            }
            rc = PyDict_SetItem(dict, name, item);
            Py_DECREF(name);
            Py_DECREF(item);
            if (rc < 0) goto failed;
            members++;
            p = skip_space(p, end);
            if (p < end && *p == '}') {
                p++;
                break;
            }
            if (p >= end || *p != ',') goto declined;
            if (out_put(out, ",", 1) < 0) goto failed;
            p = skip_space(p + 1, end);
        }
    }
    if (PyDict_GET_SIZE(dict) != members) goto declined; /* a name twice: orjson keeps the last */
    if (out_put(out, "}", 1) < 0) goto failed;
    *value = dict;
    *at = p;
    return TAKEN;
declined:
    Py_DECREF(dict);
    return DECLINED;
failed:
    Py_XDECREF(dict);
    return FAILED;
}

static int
read_value(const unsigned char **at, const unsigned char *end, int depth, Out *out,
           PyObject **value)
{
    const unsigned char *p = *at;
    if (p >= end) return DECLINED;
    switch (*p) {
    case '"':
        return read_string(at, end, out, value);
    case '{':
        if (depth >= MAX_DEPTH) return DECLINED;
        return read_object(at, end, depth + 1, out, value, NULL);
    case '[':
        if (depth >= MAX_DEPTH) return DECLINED;
        return read_array(at, end, depth + 1, out, value);
    case 't': case 'f': case 'n':
        return read_literal(at, end, out, value);
    default:
        if (*p == '-' || (*p >= '0' && *p <= '9')) return read_integer(at, end, out, value);
        return DECLINED;
    }
}

/* A text JSON writes as it is between quotes (no escapes): its UTF-8, else NULL (no error). */
static const char *
plain_text(PyObject *text, Py_ssize_t *size)
{
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, size);
    if (utf8 == NULL) {
        PyErr_Clear();
        return NULL;
    }
    for (Py_ssize_t k = 0; k < *size; k++) {
        unsigned char c = (unsigned char)utf8[k];
        if (c < 0x20 || c == '"' || c == '\\') return NULL;
    }
    return utf8;
}

/* One object at buf[pos:len]: TAKEN with *item and *next set, DECLINED or FAILED. */
static int
take_one(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t len, Py_ssize_t max_metadata,
         Py_ssize_t max_payload, const char *route, Py_ssize_t route_len, PyObject *route_ids[2],
         PyObject *prefix, PyObject *next_id, Out *out, PyObject **item, Py_ssize_t *next)
{
    const unsigned char *nul = memchr(buf + pos, 0, (size_t)(len - pos));
    if (nul == NULL || nul - (buf + pos) > max_metadata) return DECLINED;
    const unsigned char *p = skip_space(buf + pos, nul);
    if (p >= nul || *p != '{') return DECLINED;
    out->len = 0;
    IdSpot spot = {-1, 0, NULL, NULL, NULL, NULL};
    PyObject *metadata = NULL, *payload = NULL, *data = NULL, *id = NULL, *ids = NULL;
    int rc = read_object(&p, nul, 1, out, &metadata, &spot);
    if (rc != TAKEN) return rc;
    rc = DECLINED;
    if (skip_space(p, nul) != nul) goto done; /* trailing bytes after the object */
    /* A plain content object of a client, as Router.receive_batch's short path takes it. */
    if (spot.other) goto done;
    PyObject *type = spot.type ? spot.type : Py_None, *to = spot.to ? spot.to : Py_None;
    PyObject *own_id = spot.id ? spot.id : Py_None;
    if ((type != Py_None && !PyUnicode_CheckExact(type)) ||
        (to != Py_None && !PyUnicode_CheckExact(to)) ||
        (own_id != Py_None && (!PyUnicode_CheckExact(own_id) || PyUnicode_GET_LENGTH(own_id) == 0)))
        goto done; /* the general path ("" as an id too) */
    Py_ssize_t size = 0;
    PyObject *size_value = spot.size;
    if (size_value != NULL && size_value != Py_None) {
        if (!PyLong_CheckExact(size_value)) goto done;
        int overflow = 0;
        long long n = PyLong_AsLongLongAndOverflow(size_value, &overflow);
        /* 0 goes to the reference: the router drops a "size" of 0 from what it writes */
        if (overflow || n < 1 || n > max_payload) goto done;
        size = (Py_ssize_t)n;
    }
    Py_ssize_t start = nul - buf + 1;
    if (len - start < size) goto done; /* incomplete: the reference waits for the rest */
    /* Taken: the id (when there is none), the route, the bytes. */
    Py_ssize_t id_len = 0;
    const char *id_text = NULL;
    if (own_id == Py_None) {
        PyObject *number = PyObject_CallNoArgs(next_id);
        if (number == NULL) goto failed;
        int overflow = 0;
        long long n = PyLong_AsLongLongAndOverflow(number, &overflow);
        if (overflow || (n == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            id = PyUnicode_FromFormat("%U%S", prefix, number); /* past 2**63: seldom */
        } else {
            char digits[24];
            int count = 0;
            unsigned long long u = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
            char reversed[24];
            do {
                reversed[count++] = (char)('0' + u % 10);
                u /= 10;
            } while (u);
            if (n < 0) reversed[count++] = '-';
            for (int k = 0; k < count; k++) digits[k] = reversed[count - 1 - k];
            Py_ssize_t prefix_len;
            const char *prefix_text = PyUnicode_AsUTF8AndSize(prefix, &prefix_len);
            if (prefix_text != NULL) {
                char stack[256];
                char *text = prefix_len + count <= (Py_ssize_t)sizeof stack
                                 ? stack : PyMem_Malloc((size_t)(prefix_len + count));
                if (text == NULL) {
                    PyErr_NoMemory();
                } else {
                    memcpy(text, prefix_text, (size_t)prefix_len);
                    memcpy(text + prefix_len, digits, (size_t)count);
                    id = PyUnicode_DecodeUTF8(text, prefix_len + count, NULL);
                    if (text != stack) PyMem_Free(text);
                }
            }
        }
        Py_DECREF(number);
        if (id == NULL) goto failed;
        id_text = PyUnicode_AsUTF8AndSize(id, &id_len);
        if (id_text == NULL) goto failed;
    }
    ids = PyList_New(2);
    if (ids == NULL) goto failed;
    PyList_SET_ITEM(ids, 0, Py_NewRef(route_ids[0]));
    PyList_SET_ITEM(ids, 1, Py_NewRef(route_ids[1]));
    if (PyDict_SetItem(metadata, S_route, ids) < 0) goto failed;
    if (id != NULL && PyDict_SetItem(metadata, S_id, id) < 0) goto failed;
    payload = PyBytes_FromStringAndSize((const char *)buf + start, size);
    if (payload == NULL) goto failed;
    /* out holds the compact metadata; its "}" gives way to the route (and the id) */
    Py_ssize_t body = out->len - 1, total = body + route_len + 2 + size;
    int members = body > 1, id_in_place = id != NULL && spot.null_at >= 0;
    total += members; /* the comma before the route */
    if (id != NULL) total += id_in_place ? id_len + 2 - 4 : id_len + 8; /* "x" for null; ,"id":"x" */
    data = PyBytes_FromStringAndSize(NULL, total);
    if (data == NULL) goto failed;
    char *w = PyBytes_AS_STRING(data);
    if (id_in_place) {
        Py_ssize_t head = spot.null_at;
        memcpy(w, out->data, (size_t)head);
        w += head;
        *w++ = '"';
        memcpy(w, id_text, (size_t)id_len);
        w += id_len;
        *w++ = '"';
        memcpy(w, out->data + head + 4, (size_t)(body - head - 4));
        w += body - head - 4;
    } else {
        memcpy(w, out->data, (size_t)body);
        w += body;
    }
    if (members) *w++ = ',';
    memcpy(w, route, (size_t)route_len);
    w += route_len;
    if (id != NULL && !id_in_place) {
        memcpy(w, ",\"id\":\"", 7);
        w += 7;
        memcpy(w, id_text, (size_t)id_len);
        w += id_len;
        *w++ = '"';
    }
    *w++ = '}';
    *w++ = '\0';
    memcpy(w, buf + start, (size_t)size);
    *item = PyTuple_Pack(5, metadata, payload, data, type, to);
    if (*item == NULL) goto failed;
    *next = start + size;
    rc = TAKEN;
    goto done;
failed:
    rc = FAILED;
done:
    Py_XDECREF(metadata);
    Py_XDECREF(payload);
    Py_XDECREF(data);
    Py_XDECREF(id);
    Py_XDECREF(ids);
    return rc;
}

PyObject *
content_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "content_run takes 9 arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *items = NULL, *prefix = args[7], *next_id = args[8];
    Out out = {NULL, 0, 0};
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), limit = PyLong_AsSsize_t(args[2]);
    Py_ssize_t max_metadata = PyLong_AsSsize_t(args[3]), max_payload = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred()) goto fail;
    PyObject *route_ids[2] = {args[5], args[6]};
    if (!PyUnicode_Check(route_ids[0]) || !PyUnicode_Check(route_ids[1]) ||
        !PyUnicode_Check(prefix)) {
        PyErr_SetString(PyExc_TypeError, "content_run: the ids and the prefix are texts");
        goto fail;
    }
    items = PyList_New(0);
    if (items == NULL) goto fail;
    Py_ssize_t pos = start < 0 ? 0 : start;
    /* "route":["sender","server"]; ids JSON would escape: nothing for the lane */
    Py_ssize_t sender_len, own_len, prefix_len;
    const char *sender = plain_text(route_ids[0], &sender_len);
    const char *own = plain_text(route_ids[1], &own_len);
    if (sender == NULL || own == NULL || plain_text(prefix, &prefix_len) == NULL) goto done;
    Out route = {NULL, 0, 0};
    if (out_put(&route, "\"route\":[\"", 10) < 0 || out_put(&route, sender, sender_len) < 0 ||
        out_put(&route, "\",\"", 3) < 0 || out_put(&route, own, own_len) < 0 ||
        out_put(&route, "\"]", 2) < 0) {
        PyMem_Free(route.data);
        goto fail;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    while (pos < view.len && PyList_GET_SIZE(items) < limit) {
        PyObject *item = NULL;
        Py_ssize_t next = pos;
        int rc = take_one(buf, pos, view.len, max_metadata, max_payload, route.data, route.len,
                          route_ids, prefix, next_id, &out, &item, &next);
        if (rc == FAILED) {
            PyMem_Free(route.data);
            goto fail;
        }
        if (rc == DECLINED) break;
        rc = PyList_Append(items, item);
        Py_DECREF(item);
        if (rc < 0) {
            PyMem_Free(route.data);
            goto fail;
        }
        pos = next;
    }
    PyMem_Free(route.data);
done:
    PyMem_Free(out.data);
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", items, pos);
fail:
    PyMem_Free(out.data);
    Py_XDECREF(items);
    PyBuffer_Release(&view);
    return NULL;
}

int
content_lane_init(void)
{
    struct { PyObject **slot; const char *name; } names[] = {
        {&S_event, "event"}, {&S_route, "route"}, {&S_natures, "natures"}, {&S_id, "id"},
        {&S_type, "type"}, {&S_to, "to"}, {&S_size, "size"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        *names[k].slot = PyUnicode_InternFromString(names[k].name);
        if (*names[k].slot == NULL) return -1;
        keys[key_count++] = Py_NewRef(*names[k].slot); /* found by the cache as themselves */
    }
    return 0;
}
