/* bus.native._journalscan: the optional C accelerator of the busjournal reader (and of the
 * writer's record).
 *
 * Three functions, all pure (bytes in, Python bytes out; no files, no Python objects per record):
 *
 *   scan(data, start, stop, max_record, max_count, version=2, final=True, after_seq=-1)
 *       Find and verify the journal records of data[start:stop], resynchronising over damage,
 *       exactly as bus.journal.scan_records does (PROTOCOL.md section 8). Returns
 *       (offsets: bytes of int64, end, partial, [(offset, size, reason)...], last_seq).
 *
 *   decode(data, starts, lengths)
 *       Decode the message bodies data[starts[i]:starts[i]+lengths[i]] (starts and lengths:
 *       bytes of int64) into Arrow column buffers (int32 offsets, UTF-8 data, validity bitmaps),
 *       the columns of pipeline.decode.ARROW_SCHEMA that depend on the body. A record this code
 *       is not sure to render exactly as the full decoder (bus.message.message.decode_message) would is
 *       marked in the returned `bad` bytes (its row is left null) and pipeline/decode.py decodes
 *       it with the full decoder. Returns None when a column would pass 2 GiB.
 *
 *   record(raw, ts_us, seq)
 *       One v2 record of raw (PROTOCOL.md section 8) as bus.journal.format.encode_record writes
 *       it: the journal writer's append, in one allocation and one CRC pass.
 *
 * Safety: every read is bounds-checked against the buffer and the record; lengths are compared
 * unsigned before any use; output buffers are capped at INT32_MAX bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

/* ---------------------------------------------------------------------------------------- */
/* Growable byte buffers                                                                     */

#define MAX_OUT ((size_t)INT32_MAX)

/* The bytes grow inside a Python bytes object, handed over without a copy at the end. */
typedef struct {
    char *p;
    size_t len;
    size_t cap;
    PyObject *obj;
} Buf;

static int buf_grow(Buf *b, size_t extra);

static inline int buf_reserve(Buf *b, size_t extra) {
    if (extra <= b->cap - b->len) { /* len <= cap always */
        return 0;
    }
    return buf_grow(b, extra);
}

static int buf_grow(Buf *b, size_t extra) {
    if (extra > MAX_OUT - b->len) {
        return -1;
    }
    size_t need = b->len + extra;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) {
        cap = cap > MAX_OUT / 2 ? MAX_OUT : cap * 2;
    }
    if (b->obj == NULL) {
        b->obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
    } else if (_PyBytes_Resize(&b->obj, (Py_ssize_t)cap) < 0) {
        b->obj = NULL; /* freed by _PyBytes_Resize */
    }
    if (b->obj == NULL) {
        PyErr_Clear(); /* the caller falls back to the other path */
        b->p = NULL;
        b->len = b->cap = 0;
        return -1;
    }
    b->p = PyBytes_AS_STRING(b->obj);
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n) < 0) {
        return -1;
    }
    if (n) {
        memcpy(b->p + b->len, src, n);
    }
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    Py_CLEAR(b->obj);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* The bytes written, as a bytes object (the buffer is handed over and left empty). */
static PyObject *buf_bytes(Buf *b) {
    PyObject *obj = b->obj;
    size_t len = b->len;
    b->obj = NULL;
    b->p = NULL;
    b->len = b->cap = 0;
    if (obj == NULL) {
        return PyBytes_FromStringAndSize("", 0);
    }
    if (_PyBytes_Resize(&obj, (Py_ssize_t)len) < 0) {
        return NULL;
    }
    return obj;
}

/* 1 for the bytes JSON writes as they are and UTF-8 shares with Latin-1 (0x20..0x7F but " and
 * \), filled at module init. */
static uint8_t PLAIN[256];

static int ascii_only(const uint8_t *s, size_t n) {
    uint8_t high = 0;
    for (size_t i = 0; i < n; i++) {
        high |= s[i];
    }
    return high < 0x80;
}

static int all_plain(const uint8_t *s, size_t n) {
    uint8_t plain = 1;
    for (size_t i = 0; i < n; i++) {
        plain &= PLAIN[s[i]];
    }
    return plain;
}

/* Latin-1 text as UTF-8; with `json`, also escaped as Python's json module does (ensure_ascii
 * off): \" \\ \b \f \n \r \t, other bytes below 0x20 as \u00xx. At most 6 bytes per input byte. */
static int put_text(Buf *b, const uint8_t *s, size_t n, int json) {
    static const char hex[] = "0123456789abcdef";
    /* the common case: plain ASCII, copied as is */
    if (json ? all_plain(s, n) : ascii_only(s, n)) {
        if (n > MAX_OUT - 2 || buf_reserve(b, n + 2) < 0) {
            return -1;
        }
        char *o = b->p + b->len;
        if (json) {
            *o++ = '"';
        }
        memcpy(o, s, n);
        o += n;
        if (json) {
            *o++ = '"';
        }
        b->len = (size_t)(o - b->p);
        return 0;
    }
    if (n > MAX_OUT / 6 || buf_reserve(b, n * 6 + 2) < 0) {
        return -1;
    }
    char *o = b->p + b->len;
    if (json) {
        *o++ = '"';
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x80) {
            *o++ = (char)(0xC0 | (c >> 6));
            *o++ = (char)(0x80 | (c & 0x3F));
        } else if (!json || (c >= 0x20 && c != '"' && c != '\\')) {
            *o++ = (char)c;
        } else {
            *o++ = '\\';
            switch (c) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '\b': *o++ = 'b'; break;
            case '\f': *o++ = 'f'; break;
            case '\n': *o++ = 'n'; break;
            case '\r': *o++ = 'r'; break;
            case '\t': *o++ = 't'; break;
            default:
                *o++ = 'u';
                *o++ = '0';
                *o++ = '0';
                *o++ = hex[c >> 4];
                *o++ = hex[c & 15];
            }
        }
    }
    if (json) {
        *o++ = '"';
    }
    b->len = (size_t)(o - b->p);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Output columns                                                                             */

typedef struct {
    Buf data;
    int32_t *offsets; /* n + 1 */
    uint8_t *valid;   /* bitmap, (n + 7) / 8 bytes */
} TextCol;

typedef struct {
    int64_t *values;
    uint8_t *valid;
} IntCol;

static void set_bit(uint8_t *bits, Py_ssize_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }

/* ---------------------------------------------------------------------------------------- */
/* The data frame (PROTOCOL.md section 1)                                                     */

enum {
    T_FRAME = 0, T_UDEF = 1, T_BYTEARRAY = 2, T_STRING = 3, T_S8 = 4, T_U8 = 5, T_S16 = 6,
    T_U16 = 7, T_S32 = 8, T_U32 = 9, T_S64 = 10, T_U64 = 11, T_FLOAT = 12, T_DOUBLE = 13,
    T_BOOLEAN = 14, T_DATE = 15, T_URI = 16, T_ARRAY = 17
};
/* value sizes; -1 variable (u32 length) */
static const int SIZES[18] = {-1, 0, -1, -1, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 1, 8, -1, -1};

#define MAX_BODY (16u * 1024u * 1024u) /* bus.frame.codec DEFAULT_LIMITS.max_size */
#define MAX_FIELDS 100000              /* bus.frame.codec DEFAULT_LIMITS.max_fields */

typedef struct {
    const uint8_t *name;
    size_t name_len;
    int type;
    const uint8_t *value;
    size_t value_len;
} Fld;

/* The next field of frame[pos:end]; 0 on success, -1 when malformed. */
static int next_field(const uint8_t *frame, size_t *pos, size_t end, Fld *f) {
    size_t p = *pos;
    size_t name_len = frame[p];
    if (end - p < 2 + name_len) {
        return -1;
    }
    f->name = frame + p + 1;
    f->name_len = name_len;
    f->type = frame[p + 1 + name_len];
    p += 2 + name_len;
    if (f->type > T_ARRAY) {
        return -1;
    }
    size_t vlen;
    if (SIZES[f->type] < 0) {
        if (end - p < 4) {
            return -1;
        }
        const uint8_t *l = frame + p;
        vlen = ((size_t)l[0] << 24) | ((size_t)l[1] << 16) | ((size_t)l[2] << 8) | l[3];
        p += 4;
    } else {
        vlen = (size_t)SIZES[f->type];
    }
    if (end - p < vlen) {
        return -1;
    }
    for (size_t i = 0; i < name_len; i++) {
        if (f->name[i] >= 0x80) {
            return -1; /* names must be UTF-8: only ASCII is taken here */
        }
    }
    f->value = frame + p;
    f->value_len = vlen;
    *pos = p + vlen;
    return 0;
}

static int is_text(int t) { return t == T_STRING || t == T_URI; }
static int is_int(int t) { return t >= T_S8 && t <= T_U64; }

static int64_t read_int(const Fld *f, int *negative_u64) {
    const uint8_t *v = f->value;
    uint64_t u = 0;
    for (size_t i = 0; i < f->value_len; i++) {
        u = (u << 8) | v[i];
    }
    *negative_u64 = 0;
    switch (f->type) {
    case T_S8: return (int8_t)u;
    case T_S16: return (int16_t)u;
    case T_S32: return (int32_t)u;
    case T_U64: *negative_u64 = (u >> 63) != 0; return (int64_t)u;
    default: return (int64_t)u;
    }
}

static double read_double(const Fld *f) {
    uint64_t u = 0;
    for (size_t i = 0; i < f->value_len; i++) {
        u = (u << 8) | f->value[i];
    }
    if (f->type == T_FLOAT) {
        uint32_t w = (uint32_t)u;
        float x;
        memcpy(&x, &w, 4);
        return (double)x;
    }
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* Header fields wanted, in the order of the outputs: text, ints, then PLD. */
/* The text ones are pipeline.rows.HEADER_TEXT without ENC (pipeline/decode.py _C_TEXT). */
static const char *WANTED[] = {"MID", "RID", "GRP", "RPY", "TYP", "CMD", "MSG", "SRC",
                               "TGT", "CLR", "TRC", "RCD", "FLG", "XPY", "PRI", "PLD"};
#define N_TEXT 11
#define N_INT 4
#define N_WANTED 16
#define W_CMD 5
#define W_PLD 15
_Static_assert(sizeof WANTED / sizeof WANTED[0] == N_WANTED, "WANTED and N_WANTED disagree");

static uint32_t KEYS[N_WANTED]; /* the names as 24-bit words, filled at module init */
static int8_t SLOT_OF[256];     /* hash -> slot, -1 none, -2 several (then a linear scan) */

static inline unsigned key_hash(uint32_t key) { return (key * 2654435761u) >> 24; }

static void slots_init(void) {
    memset(SLOT_OF, -1, sizeof SLOT_OF);
    for (int k = 0; k < N_WANTED; k++) {
        const uint8_t *w = (const uint8_t *)WANTED[k];
        KEYS[k] = ((uint32_t)w[0] << 16) | ((uint32_t)w[1] << 8) | w[2];
        unsigned h = key_hash(KEYS[k]);
        SLOT_OF[h] = SLOT_OF[h] == -1 ? (int8_t)k : (int8_t)-2;
    }
}

static int wanted_slot(const Fld *f) {
    if (f->name_len != 3) {
        return -1;
    }
    uint32_t key = ((uint32_t)f->name[0] << 16) | ((uint32_t)f->name[1] << 8) | f->name[2];
    int slot = SLOT_OF[key_hash(key)];
    if (slot >= 0) {
        return KEYS[slot] == key ? slot : -1;
    }
    if (slot == -1) {
        return -1;
    }
    for (int k = 0; k < N_WANTED; k++) {
        if (KEYS[k] == key) {
            return k;
        }
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* One record                                                                                 */

typedef struct {
    Fld *items;
    size_t count;
    size_t cap;
} Flds;

static int flds_push(Flds *a, const Fld *f) {
    if (a->count == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        Fld *items = (Fld *)PyMem_Realloc(a->items, cap * sizeof(Fld));
        if (items == NULL) {
            return -1;
        }
        a->items = items;
        a->cap = cap;
    }
    a->items[a->count++] = *f;
    return 0;
}

typedef struct {
    Fld header[N_WANTED];
    int found[N_WANTED];
    Flds payload;
    const Fld *cmd; /* the CMD column's source field, or NULL */
} Record;

/* Read one body; 1 when the fast path takes it, 0 when it is for the full decoder, -1 on
 * memory error. */
static int read_record(const uint8_t *body, size_t len, Record *r) {
    memset(r->found, 0, sizeof(r->found));
    r->payload.count = 0;
    r->cmd = NULL;
    if (len == 0 || len > MAX_BODY) {
        return 0;
    }
    size_t pos = 0, fields = 0;
    Fld f;
    while (pos < len) {
        if (next_field(body, &pos, len, &f) < 0) {
            return 0;
        }
        fields++;
        int slot = wanted_slot(&f);
        if (f.type == T_ARRAY || f.type == T_DATE || (f.type == T_FRAME && slot != W_PLD)) {
            return 0; /* values needing a deeper check than this path makes */
        }
        if (slot >= 0 && !r->found[slot]) {
            r->found[slot] = 1;
            r->header[slot] = f;
        } else if (f.type == T_FRAME) {
            return 0; /* a second PLD frame: its inside is not checked here */
        }
    }
    for (int k = 0; k < N_TEXT; k++) {
        if (r->found[k] && !is_text(r->header[k].type)) {
            return 0;
        }
    }
    for (int k = N_TEXT; k < N_TEXT + N_INT; k++) {
        if (r->found[k] && !is_int(r->header[k].type)) {
            return 0;
        }
    }
    if (r->found[W_CMD]) {
        r->cmd = &r->header[W_CMD];
    }
    if (!r->found[W_PLD]) {
        return 1;
    }
    const Fld *pld = &r->header[W_PLD];
    if (pld->type != T_FRAME) {
        return 0;
    }
    pos = 0;
    while (pos < pld->value_len) {
        if (next_field(pld->value, &pos, pld->value_len, &f) < 0) {
            return 0;
        }
        if (f.name_len == 0 || f.type == T_FRAME || f.type == T_ARRAY || f.type == T_DATE ||
            f.type == T_BYTEARRAY) {
            return 0;
        }
        if (++fields > MAX_FIELDS) {
            return 0;
        }
        if (flds_push(&r->payload, &f) < 0) {
            return -1;
        }
    }
    if (r->cmd == NULL) {
        for (size_t i = 0; i < r->payload.count; i++) {
            const Fld *p = &r->payload.items[i];
            if (p->name_len == 3 && memcmp(p->name, "CMD", 3) == 0) {
                if (!is_text(p->type)) {
                    return 0;
                }
                r->cmd = p;
                break;
            }
        }
    }
    return 1;
}

/* repr(d) without Python's dtoa for the common case: d == m / 10^k exactly as a double, with
 * 0 < |m| < 10^15, k <= 15 and 1e-4 <= |d| (repr's fixed notation). With the smallest such k
 * the digits of m are the shortest that read back as d (only one m of that length can, since
 * 10^-k is more than 4 ulps of d), which is what repr prints. 1 written, 0 not taken, -1 on
 * error. */
static int put_short_double(Buf *b, double d) {
    static const double POW10[16] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7,
                                     1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    double a = d < 0 ? -d : d;
    if (!(a >= 1e-4 && a < 1e15)) {
        return 0;
    }
    for (int k = 0; k < 16; k++) {
        double scaled = a * POW10[k];
        if (scaled >= 1e15) {
            return 0;
        }
        double m = (double)(int64_t)(scaled + 0.5);
        if (m == 0 || m / POW10[k] != a) {
            continue;
        }
        char digits[24];
        int n = 0;
        uint64_t u = (uint64_t)m;
        while (u) {
            digits[n++] = (char)('0' + u % 10);
            u /= 10;
        }
        /* digits[] holds m backwards; print with a point k digits from the right */
        char out[48];
        int o = 0;
        if (d < 0) {
            out[o++] = '-';
        }
        if (n <= k) {
            out[o++] = '0';
            out[o++] = '.';
            for (int z = 0; z < k - n; z++) {
                out[o++] = '0';
            }
            for (int i = n - 1; i >= 0; i--) {
                out[o++] = digits[i];
            }
        } else {
            for (int i = n - 1; i >= 0; i--) {
                out[o++] = digits[i];
                if (i == k && k > 0) {
                    out[o++] = '.';
                }
            }
            if (k == 0) {
                out[o++] = '.';
                out[o++] = '0';
            }
        }
        return buf_put(b, out, (size_t)o) < 0 ? -1 : 1;
    }
    return 0;
}

/* A scalar value as JSON text (json: strings quoted and escaped) into `b`. */
static int put_value(Buf *b, const Fld *f, int json) {
    char tmp[32];
    int n;
    int negative_u64;
    switch (f->type) {
    case T_STRING:
    case T_URI:
        return put_text(b, f->value, f->value_len, json);
    case T_UDEF:
        return buf_put(b, "null", 4);
    case T_BOOLEAN:
        return (int8_t)f->value[0] > 0 ? buf_put(b, "true", 4) : buf_put(b, "false", 5);
    case T_FLOAT:
    case T_DOUBLE: {
        double d = read_double(f);
        if (!isfinite(d)) {
            return buf_put(b, "null", 4);
        }
        int fast = put_short_double(b, d);
        if (fast != 0) {
            return fast < 0 ? -1 : 0;
        }
        char *text = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (text == NULL) {
            PyErr_Clear();
            return -1;
        }
        /* to_json's rule (PROTOCOL.md 1.7): an exponent without a fraction gets ".0" (1.0e-07),
         * so Java's JsonFrameParser reads it back as a DOUBLE */
        const char *e = strchr(text, 'e');
        int rc;
        if (e != NULL && memchr(text, '.', (size_t)(e - text)) == NULL) {
            rc = buf_put(b, text, (size_t)(e - text));
            if (rc >= 0) {
                rc = buf_put(b, ".0", 2);
            }
            if (rc >= 0) {
                rc = buf_put(b, e, strlen(e));
            }
        } else {
            rc = buf_put(b, text, strlen(text));
        }
        PyMem_Free(text);
        return rc;
    }
    default: {
        int64_t v = read_int(f, &negative_u64);
        int minus = v < 0 && !negative_u64;
        uint64_t u = minus ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        n = (int)sizeof tmp;
        do {
            tmp[--n] = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (minus) {
            tmp[--n] = '-';
        }
        return buf_put(b, tmp + n, sizeof tmp - (size_t)n);
    }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* decode()                                                                                   */

typedef struct {
    Py_ssize_t n;
    uint8_t *bad;
    TextCol text[N_TEXT];
    IntCol ints[N_INT];
    TextCol payload;
    int32_t *map_offsets;
    uint8_t *map_valid;
    Buf keys, values;
    Buf key_offsets, value_offsets; /* int32 each */
    int32_t entries;
} Out;

static void out_free(Out *o) {
    PyMem_Free(o->bad);
    for (int k = 0; k < N_TEXT; k++) {
        buf_free(&o->text[k].data);
        PyMem_Free(o->text[k].offsets);
        PyMem_Free(o->text[k].valid);
    }
    for (int k = 0; k < N_INT; k++) {
        PyMem_Free(o->ints[k].values);
        PyMem_Free(o->ints[k].valid);
    }
    buf_free(&o->payload.data);
    PyMem_Free(o->payload.offsets);
    PyMem_Free(o->payload.valid);
    PyMem_Free(o->map_offsets);
    PyMem_Free(o->map_valid);
    buf_free(&o->keys);
    buf_free(&o->values);
    buf_free(&o->key_offsets);
    buf_free(&o->value_offsets);
}

static int text_col_alloc(TextCol *c, Py_ssize_t n) {
    c->offsets = (int32_t *)PyMem_Calloc((size_t)n + 1, sizeof(int32_t));
    c->valid = (uint8_t *)PyMem_Calloc((size_t)(n + 7) / 8 + 1, 1);
    return c->offsets && c->valid ? 0 : -1;
}

static int out_alloc(Out *o, Py_ssize_t n) {
    memset(o, 0, sizeof(*o));
    o->n = n;
    o->bad = (uint8_t *)PyMem_Calloc((size_t)n + 1, 1);
    if (o->bad == NULL) {
        return -1;
    }
    for (int k = 0; k < N_TEXT; k++) {
        if (text_col_alloc(&o->text[k], n) < 0) {
            return -1;
        }
    }
    for (int k = 0; k < N_INT; k++) {
        o->ints[k].values = (int64_t *)PyMem_Calloc((size_t)n + 1, sizeof(int64_t));
        o->ints[k].valid = (uint8_t *)PyMem_Calloc((size_t)(n + 7) / 8 + 1, 1);
        if (!o->ints[k].values || !o->ints[k].valid) {
            return -1;
        }
    }
    if (text_col_alloc(&o->payload, n) < 0) {
        return -1;
    }
    o->map_offsets = (int32_t *)PyMem_Calloc((size_t)n + 1, sizeof(int32_t));
    o->map_valid = (uint8_t *)PyMem_Calloc((size_t)(n + 7) / 8 + 1, 1);
    int32_t zero = 0;
    if (!o->map_offsets || !o->map_valid || buf_put(&o->key_offsets, &zero, 4) < 0 ||
        buf_put(&o->value_offsets, &zero, 4) < 0) {
        return -1;
    }
    return 0;
}

/* Row i of the outputs from a record the fast path took; -1 when a buffer is full. */
static int emit(Out *o, Py_ssize_t i, const Record *r) {
    for (int k = 0; k < N_TEXT; k++) {
        const Fld *f = k == W_CMD ? r->cmd : (r->found[k] ? &r->header[k] : NULL);
        if (f != NULL) {
            if (put_text(&o->text[k].data, f->value, f->value_len, 0) < 0) {
                return -1;
            }
            set_bit(o->text[k].valid, i);
        }
    }
    for (int k = 0; k < N_INT; k++) {
        if (r->found[N_TEXT + k]) {
            int negative_u64;
            o->ints[k].values[i] = read_int(&r->header[N_TEXT + k], &negative_u64);
            set_bit(o->ints[k].valid, i);
        }
    }
    if (r->found[W_PLD]) {
        Buf *p = &o->payload.data;
        if (buf_put(p, "{", 1) < 0) {
            return -1;
        }
        for (size_t j = 0; j < r->payload.count; j++) {
            const Fld *f = &r->payload.items[j];
            if ((j && buf_put(p, ",", 1) < 0) || put_text(p, f->name, f->name_len, 1) < 0 ||
                buf_put(p, ":", 1) < 0 || put_value(p, f, 1) < 0 ||
                put_text(&o->keys, f->name, f->name_len, 0) < 0 ||
                put_value(&o->values, f, 0) < 0) {
                return -1;
            }
            int32_t ko = (int32_t)o->keys.len, vo = (int32_t)o->values.len;
            if (o->entries == INT32_MAX || buf_put(&o->key_offsets, &ko, 4) < 0 ||
                buf_put(&o->value_offsets, &vo, 4) < 0) {
                return -1;
            }
            o->entries++;
        }
        if (buf_put(p, "}", 1) < 0) {
            return -1;
        }
        set_bit(o->payload.valid, i);
        set_bit(o->map_valid, i);
    }
    return 0;
}

static void close_row(Out *o, Py_ssize_t i) {
    for (int k = 0; k < N_TEXT; k++) {
        o->text[k].offsets[i + 1] = (int32_t)o->text[k].data.len;
    }
    o->payload.offsets[i + 1] = (int32_t)o->payload.data.len;
    o->map_offsets[i + 1] = o->entries;
}

static PyObject *bitmap(const uint8_t *bits, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)bits, (n + 7) / 8);
}

static PyObject *text_tuple(TextCol *c, Py_ssize_t n) {
    return Py_BuildValue("(NNN)",
                         PyBytes_FromStringAndSize((const char *)c->offsets,
                                                   (Py_ssize_t)((size_t)(n + 1) * 4)),
                         buf_bytes(&c->data), bitmap(c->valid, n));
}

static PyObject *out_result(Out *o) {
    Py_ssize_t n = o->n;
    PyObject *texts = PyList_New(N_TEXT);
    PyObject *ints = PyList_New(N_INT);
    if (texts == NULL || ints == NULL) {
        Py_XDECREF(texts);
        Py_XDECREF(ints);
        return NULL;
    }
    for (int k = 0; k < N_TEXT; k++) {
        PyObject *t = text_tuple(&o->text[k], n);
        if (t == NULL) {
            Py_DECREF(texts);
            Py_DECREF(ints);
            return NULL;
        }
        PyList_SET_ITEM(texts, k, t);
    }
    for (int k = 0; k < N_INT; k++) {
        PyObject *t = Py_BuildValue(
            "(NN)",
            PyBytes_FromStringAndSize((const char *)o->ints[k].values, (Py_ssize_t)(n * 8)),
            bitmap(o->ints[k].valid, n));
        if (t == NULL) {
            Py_DECREF(texts);
            Py_DECREF(ints);
            return NULL;
        }
        PyList_SET_ITEM(ints, k, t);
    }
    return Py_BuildValue(
        "{s:N,s:N,s:N,s:N,s:(NNNNNN)}", "bad", PyBytes_FromStringAndSize((const char *)o->bad, n),
        "text", texts, "ints", ints, "payload", text_tuple(&o->payload, n), "map",
        PyBytes_FromStringAndSize((const char *)o->map_offsets, (Py_ssize_t)((size_t)(n + 1) * 4)),
        bitmap(o->map_valid, n), buf_bytes(&o->key_offsets), buf_bytes(&o->keys),
        buf_bytes(&o->value_offsets), buf_bytes(&o->values));
}

static int get_int64s(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    if (view->len % 8 != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s: not a buffer of int64", what);
        return -1;
    }
    return 0;
}

static PyObject *js_decode(PyObject *self, PyObject *args) {
    PyObject *data_obj, *starts_obj, *lengths_obj;
    if (!PyArg_ParseTuple(args, "OOO:decode", &data_obj, &starts_obj, &lengths_obj)) {
        return NULL;
    }
    Py_buffer data, starts, lengths;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (get_int64s(starts_obj, &starts, "starts") < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (get_int64s(lengths_obj, &lengths, "lengths") < 0) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&starts);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = starts.len / 8;
    Out out;
    Record rec;
    memset(&rec, 0, sizeof(rec));
    if (lengths.len != starts.len) {
        PyErr_SetString(PyExc_ValueError, "starts and lengths differ in length");
        goto done;
    }
    if (out_alloc(&out, n) < 0) {
        PyErr_NoMemory();
        goto free_out;
    }
    const uint8_t *buf = (const uint8_t *)data.buf;
    uint64_t size = (uint64_t)data.len;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s, l;
        memcpy(&s, (const char *)starts.buf + i * 8, 8);
        memcpy(&l, (const char *)lengths.buf + i * 8, 8);
        int ok = 0;
        if (s >= 0 && l >= 0 && (uint64_t)s <= size && (uint64_t)l <= size - (uint64_t)s) {
            ok = read_record(buf + s, (size_t)l, &rec);
            if (ok < 0) {
                PyErr_NoMemory();
                goto free_out;
            }
        }
        if (ok && emit(&out, i, &rec) < 0) {
            result = Py_None; /* a column past 2 GiB (or no memory): the caller's other path */
            Py_INCREF(result);
            goto free_out;
        }
        if (!ok) {
            out.bad[i] = 1;
        }
        close_row(&out, i);
    }
    result = out_result(&out);
free_out:
    out_free(&out);
done:
    PyMem_Free(rec.payload.items);
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&lengths);
    return result;
}

/* CRC-32 (zlib's) folded with carry-less multiplication on x86-64 (Intel's "Fast CRC Computation
 * Using PCLMULQDQ", as Chromium's zlib does), zlib's crc32_z elsewhere or without the CPU
 * feature. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CLMUL_CRC 1

__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(const uint8_t *buf, size_t len,
                                                                       uint32_t crc) {
    /* len >= 64 and a multiple of 16; crc is the inverted running value */
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = poly;
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static int use_clmul = 0; /* set at module init from the CPU's features */

static uint32_t crc32_of(const uint8_t *buf, size_t len) {
    uint32_t crc = 0;
#ifdef HAVE_CLMUL_CRC
    if (use_clmul && len >= 64) {
        size_t chunk = len & ~(size_t)15;
        crc = ~crc32_clmul(buf, chunk, ~(uint32_t)0);
        buf += chunk;
        len -= chunk;
    }
#endif
    return (uint32_t)crc32_z(crc, buf, (z_size_t)len);
}

static void crc32_init(void) {
#ifdef HAVE_CLMUL_CRC
    __builtin_cpu_init();
    use_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

/* ---------------------------------------------------------------------------------------- */
/* scan()                                                                                     */

typedef struct {
    const uint8_t *b;
    Py_ssize_t size;
    Py_ssize_t header; /* 20 (v1) or 28 (v2) */
    const char *magic; /* "BJR1" or "BJR2" */
    int v2;
    unsigned long long max_record;
} ScanCtx;

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* A whole record whose magic, length and CRC check out (and, v2, seq > after) at pos? */
static int valid_at(const ScanCtx *c, Py_ssize_t pos, int64_t after) {
    if (c->size - pos < c->header) {
        return 0;
    }
    const uint8_t *h = c->b + pos;
    uint64_t length = be32(h + 8);
    if (length > c->max_record || length > (uint64_t)(c->size - pos - c->header)) {
        return 0;
    }
    if (crc32_of(h + 8, (size_t)(c->header - 8 + length)) != be32(h + 4)) {
        return 0;
    }
    if (c->v2) {
        uint64_t seq = be64(h + 20);
        if (after >= 0 && seq <= (uint64_t)after) {
            return 0;
        }
    }
    return 1;
}

/* The first offset from `from` where a valid record starts, or -1 (bus.journal.format._resync). */
static Py_ssize_t resync(const ScanCtx *c, Py_ssize_t from, int64_t after) {
    Py_ssize_t pos = from;
    while (pos + 4 <= c->size) {
        const uint8_t *hit = memchr(c->b + pos, 'B', (size_t)(c->size - pos - 3));
        if (hit == NULL) {
            return -1;
        }
        pos = hit - c->b;
        if (memcmp(hit, c->magic, 4) == 0 && valid_at(c, pos, after)) {
            return pos;
        }
        pos++;
    }
    return -1;
}

/* Whether the bytes from pos to the end are a whole record with only its length field wrong. */
static int whole_but_length(const ScanCtx *c, Py_ssize_t pos) {
    Py_ssize_t rest = c->size - pos;
    if (rest < c->header) {
        return 0;
    }
    const uint8_t *h = c->b + pos;
    uint64_t actual = (uint64_t)(rest - c->header);
    if (actual > 0xFFFFFFFFu) {
        return 0;
    }
    uint8_t len[4] = {(uint8_t)(actual >> 24), (uint8_t)(actual >> 16), (uint8_t)(actual >> 8),
                      (uint8_t)actual};
    uint32_t crc = (uint32_t)crc32_z(0, len, 4);
    crc = (uint32_t)crc32_z(crc, h + 12, (z_size_t)(rest - 12));
    return crc == be32(h + 4);
}

static int add_damage(PyObject *list, Py_ssize_t at, Py_ssize_t size, const char *reason) {
    PyObject *item = Py_BuildValue("(nns)", at, size, reason);
    if (item == NULL) {
        return -1;
    }
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *js_scan(PyObject *self, PyObject *args) {
    PyObject *data_obj;
    Py_ssize_t start, stop, max_count;
    unsigned long long max_record;
    int version = 2, final = 1;
    long long after_seq = -1;
    if (!PyArg_ParseTuple(args, "OnnKn|ipL:scan", &data_obj, &start, &stop, &max_record,
                          &max_count, &version, &final, &after_seq)) {
        return NULL;
    }
    Py_buffer data;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    ScanCtx c = {(const uint8_t *)data.buf, data.len, version >= 2 ? 28 : 20,
                 version >= 2 ? "BJR2" : "BJR1", version >= 2, max_record};
    Py_ssize_t size = c.size;
    Py_ssize_t limit = stop < 0 ? size : (stop < size ? stop : size);
    Py_ssize_t last_header = size - c.header;
    Py_ssize_t left = max_count < 0 ? -1 : max_count;
    Py_ssize_t pos = start < 0 ? 0 : start, partial = 0;
    int64_t last_seq = after_seq;
    char reason_buf[96];
    Buf offsets = {NULL, 0, 0, NULL};
    PyObject *result = NULL;
    PyObject *damage = PyList_New(0);
    if (damage == NULL) {
        goto done;
    }
    while (pos < limit && left) {
        const char *reason = NULL;
        const uint8_t *h = c.b + pos;
        if (pos > last_header) {
            Py_ssize_t n = size - pos < 4 ? size - pos : 4;
            if (memcmp(h, c.magic, (size_t)n) != 0) {
                reason = "bad record magic";
            }
        } else {
            uint64_t length = be32(h + 8);
            if (memcmp(h, c.magic, 4) != 0) {
                reason = "bad record magic";
            } else if (length > max_record) {
                snprintf(reason_buf, sizeof reason_buf,
                         "record length %llu exceeds max_record %llu",
                         (unsigned long long)length, max_record);
                reason = reason_buf;
            } else if (length <= (uint64_t)(size - pos - c.header)) {
                /* CRC of bytes 8 .. end: the length, the ts, (the seq,) the body */
                if (crc32_of(h + 8, (size_t)(c.header - 8 + length)) == be32(h + 4)) {
                    int64_t at = pos;
                    if (buf_put(&offsets, &at, 8) < 0) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    if (c.v2) {
                        last_seq = (int64_t)be64(h + 20);
                    }
                    pos += c.header + (Py_ssize_t)length;
                    left--;
                    continue;
                }
                reason = "checksum mismatch";
            }
        }
        if (reason == NULL) { /* an incomplete record: a torn tail unless a valid one follows */
            Py_ssize_t again = final ? resync(&c, pos + 1, last_seq) : -1;
            if (again < 0 && final && whole_but_length(&c, pos)) {
                if (add_damage(damage, pos, size - pos, "record length field damaged") < 0) {
                    goto done;
                }
                pos = size;
                break;
            }
            if (again < 0) {
                partial = size - pos;
                break;
            }
            if (add_damage(damage, pos, again - pos, "record runs past the next record") < 0) {
                goto done;
            }
            pos = again;
            continue;
        }
        Py_ssize_t again = resync(&c, pos + 1, last_seq);
        if (add_damage(damage, pos, (again < 0 ? size : again) - pos, reason) < 0) {
            goto done;
        }
        if (again < 0) {
            pos = size;
            break;
        }
        pos = again;
    }
    result = Py_BuildValue("(NnnOL)", buf_bytes(&offsets), pos, partial, damage,
                           (long long)last_seq);
done:
    Py_XDECREF(damage);
    buf_free(&offsets);
    PyBuffer_Release(&data);
    return result;
}

/* record(raw, ts_us, seq) -> bytes: one v2 record as the journal writer appends it (bus/journal/
 * format.py encode_record is the reference): magic, CRC-32 of the rest, length, time, sequence
 * number, body; built in one allocation, its CRC in one pass. */
static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static PyObject *js_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "record(raw: bytes, ts_us: int, seq: int)");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[1]);
    if (ts == -1 && PyErr_Occurred()) return NULL;
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[2]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    if ((unsigned long long)n > 0xFFFFFFFFull) {
        PyErr_SetString(PyExc_OverflowError, "record(): body longer than 2**32 - 1 bytes");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, 28 + n);
    if (out == NULL) return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    memcpy(p, "BJR2", 4);
    put32(p + 8, (uint32_t)n);
    put32(p + 12, (uint32_t)((uint64_t)ts >> 32));
    put32(p + 16, (uint32_t)(uint64_t)ts);
    put32(p + 20, (uint32_t)(seq >> 32));
    put32(p + 24, (uint32_t)seq);
    memcpy(p + 28, PyBytes_AS_STRING(args[0]), (size_t)n);
    put32(p + 4, crc32_of(p + 8, (size_t)(20 + n)));
    return out;
}

static PyMethodDef methods[] = {
    {"scan", js_scan, METH_VARARGS,
     "scan(data, start, stop, max_record, max_count, version=2, final=True, after_seq=-1)"
     " -> (offsets, end, partial, damage, last_seq)"},
    {"decode", js_decode, METH_VARARGS, "decode(data, starts, lengths) -> columns or None"},
    {"record", (PyCFunction)(void (*)(void))js_record, METH_FASTCALL,
     "record(raw, ts_us, seq) -> bytes: one v2 journal record"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "bus.native._journalscan", "C accelerator of the busjournal reader.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__journalscan(void) {
    crc32_init();
    for (int c = 0; c < 256; c++) {
        PLAIN[c] = c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
    }
    slots_init();
    return PyModule_Create(&module);
}
