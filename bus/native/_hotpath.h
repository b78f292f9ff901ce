/*
 * What the parts of the bus.native._hotpath accelerator share: the routing header as the
 * header peek reads it (docs/PROTOCOL.md 5.1), and the helpers _hotpath.c defines for the
 * other parts (_hotpath_confirm.c, the broker's confirm lane).
 */
#ifndef BUSGATE_HOTPATH_H
#define BUSGATE_HOTPATH_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* H_CLR and H_TRC (caller, trace: docs/PROTOCOL.md 5.11) and H_RPL (a replayed event's pattern,
 * 5.14) come last in the tuple (18, 19, 20); SEQ, an integer, after them (21). */
enum {
    H_TYP = 0, H_GRP, H_TGT, H_RPY, H_MID, H_RID, H_SRC, H_CMD, H_ENC, H_CLR, H_TRC, H_RPL,
    H_TEXTS
};
#define H_FIRST_TEXTS 9

typedef struct {
    Py_ssize_t start[H_TEXTS];  /* value span of the first field of each name; -1: absent */
    Py_ssize_t stop[H_TEXTS];
    int flg_seen, rcd_seen, xpy_seen, seq_seen;
    long long flg, rcd, xpy, seq;
    int unusual;                /* a header field peek cannot hand over as it is */
    unsigned seen;              /* header names met so far (a repeated one is unusual) */
    Py_ssize_t pld_start, pld_end, pld_fields;
} Header;

/* The first arguments route and confirm_run share (RUN_ARGS of them): bodies, start, limit,
 * office, trusted, max_size, max_depth, max_fields, max_name: the bodies of one read, where the
 * run starts and how many it may take, the sender's post office (bytes) and whether it may name
 * another sender, and the link's frame limits (bus.frame.frame_decoder.Limits) with the broker's
 * longest name. */
#define RUN_ARGS 9
typedef struct {
    PyObject *bodies;           /* a list of bytes (borrowed) */
    Py_ssize_t start, end;      /* bodies[start:end]: at most limit of them */
    const char *office;
    Py_ssize_t office_n;
    int trusted;
    int max_depth;
    Py_ssize_t max_size, max_fields, max_name;
} RunArgs;

/* Reads args[0:RUN_ARGS] into *run: 0, or -1 with an exception set (a TypeError naming
 * ``who`` for a wrong type, a ValueError for a negative start or limit). */
int parse_run_args(PyObject *const *args, const char *who, RunArgs *run);

/* The header of a body as peek reads it: 1 when it vouches for the body (*enc 0 for a binary
 * frame, 1 for JSON), 0 when the body is to be decoded instead. */
int read_head(const unsigned char *buf, Py_ssize_t n, int max_depth, Py_ssize_t max_fields,
              int json_only, Header *h, int *enc, int *quirks, Py_ssize_t *left);
/* Whether the first field named ``kind`` holds exactly ``text``. */
int span_is(const unsigned char *buf, const Header *h, int kind, const char *text, Py_ssize_t n);
/* Whether SRC and CLR already name the sender (bus/broker/stamp.py Stamper.stamp's first test). */
int stamped(const unsigned char *buf, const Header *h, int request, const char *office,
            Py_ssize_t office_n, int trusted);
/* bus.discovery.names.RESERVED_PREFIXES: the system's event types. */
int reserved_type(const unsigned char *grp, Py_ssize_t n);
/* The 16 bytes at p as a version-4 UUID's 36 characters of text (bus.message.ids.format_id). */
void format_uuid(const unsigned char *p, unsigned char *out);
/* 1 when value is plain data whose JSON mapping is the identity within depth and *left fields
 * (bus.message.jsonwire._plain); 0 otherwise; -1 with an exception set. */
int plain_value(PyObject *value, int depth, Py_ssize_t *left);

#endif
