/*
 * The broker's confirm lane, part of the bus.native._hotpath accelerator (docs/PROTOCOL.md 5.12,
 * confirmed publish; 8, the journal's records; 10.1, what an ACK promises). The reference it
 * mirrors, body for body, is the pure-Python loop of bus/broker/confirming.py
 * (ConfirmedPublishing._confirm_run); bus/broker/confirm_native.py calls it.
 *
 * confirm_run(bodies, start, limit, office, trusted, max_size, max_depth, max_fields, max_name,
 *             office_text, seen, entries, now, window, record, ts, pending, subscribers,
 *             deliver, with_seq, ids, ids_pos, held, conn, ready, central)
 *     -> (next, seq, offset, ids_pos, dropped, evicted, error)
 *
 * Takes bodies[start:], at most ``limit`` of them, while each is the usual confirmed publish:
 * a binary event (TYP EVT, RPY set, a GRP that is not the system's, no TGT) whose SRC and CLR
 * already name the sender (office, as bytes), whose RPY, MID and TRC are ASCII, whose MID is not
 * in the de-duplication window ``seen`` (a retry goes to the one-by-one lane), and whose journal
 * record fits the journal's window: ``window`` is (last seq, reserved seq, segment size,
 * max segment bytes, the index block's end, max record), as bus.journal.Journal.append_window
 * hands it out (None: the journal needs its own path, nothing is taken). For each one taken:
 *   - its record (``record(raw, ts, seq)``, bus.journal.pending._record) joins ``pending``, the
 *     journal's unwritten records (the broker writes them with one write() per input batch);
 *   - the event goes to its subscribers (``subscribers(grp)``; ``deliver(numbers,
 *     with_seq(raw, 0, seq))``), or is counted dropped when nobody subscribes;
 *   - its MID is remembered: ``seen[(office_text, mid)] = (seq, now)``, the oldest entry
 *     popped past ``entries``;
 *   - its ACK {seq} (bus.message.message_binary.reply_bytes with ``central`` as SRC and a MID
 *     formatted from ``ids`` at ``ids_pos``) is held: ``held.append((seq, inbox, ack, raw))``,
 *     released once the journal's write (or fsync) covers it.
 * After a delivery the run stops if the sender's link is no longer ``ready`` (an eviction).
 * Returns the index of the first body left, the journal's new last seq and size, the next
 * unused id position, how many were dropped, whether ``seen`` lost its oldest entries, and
 * the exception that stopped the run midway (None): the caller accounts for what was taken,
 * then raises it.
 */
#include "_hotpath.h"

#include <stdint.h>
#include <string.h>

#define FT_FRAME 0  /* bus.frame field types (PROTOCOL.md 3) */
#define FT_STRING 3
#define FT_U32 9
#define FT_S64 10

static PyObject *S_state, *S_popitem;

int
confirm_lane_init(void)
{
    S_state = PyUnicode_InternFromString("state");
    S_popitem = PyUnicode_InternFromString("popitem");
    return S_state == NULL || S_popitem == NULL ? -1 : 0;
}

static int
ascii_span(const unsigned char *buf, const Header *h, int kind)
{
    for (Py_ssize_t k = h->start[kind]; k < h->stop[kind]; k++) {
        if (buf[k] & 0x80) return 0;
    }
    return 1;
}

static Py_ssize_t
span_len(const Header *h, int kind)
{
    return h->start[kind] < 0 ? 0 : h->stop[kind] - h->start[kind];
}

static unsigned char *
put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
    return p + 4;
}

/* A STRING field: name length, name, type, u32 length, the text. */
static unsigned char *
put_text(unsigned char *p, const char *name, const unsigned char *text, Py_ssize_t n)
{
    *p++ = 3;
    memcpy(p, name, 3);
    p += 3;
    *p++ = FT_STRING;
    p = put32(p, (uint32_t)n);
    memcpy(p, text, (size_t)n);
    return p + n;
}

#define TEXT_FIELD 9 /* a STRING field's bytes besides its text */

/* The ACK {seq} of the publish in buf (read as h): reply_bytes(rpy, mid, id, "ACK", central,
 * trc, {"seq": seq}), in Kestrel's order (PROTOCOL.md 2.3). */
static PyObject *
ack_bytes(const unsigned char *buf, const Header *h, const unsigned char *id,
          const unsigned char *central, Py_ssize_t central_n, unsigned long long seq)
{
    int wide = seq > 0xFFFFFFFFull; /* U32 when it fits, else S64 (as make_field writes it) */
    Py_ssize_t pld = 5 + (wide ? 8 : 4);
    Py_ssize_t size = TEXT_FIELD + span_len(h, H_RPY) + TEXT_FIELD + 4 + TEXT_FIELD + 36
        + TEXT_FIELD + 3 + 9 + pld + TEXT_FIELD + central_n;
    if (h->start[H_MID] >= 0) size += TEXT_FIELD + span_len(h, H_MID);
    if (h->start[H_TRC] >= 0) size += TEXT_FIELD + span_len(h, H_TRC);
    PyObject *ack = PyBytes_FromStringAndSize(NULL, size);
    if (ack == NULL) return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(ack);
    p = put_text(p, "GRP", buf + h->start[H_RPY], span_len(h, H_RPY));
    if (h->start[H_MID] >= 0) p = put_text(p, "RID", buf + h->start[H_MID], span_len(h, H_MID));
    p = put_text(p, "ENC", (const unsigned char *)"FRAM", 4);
    unsigned char text[36];
    format_uuid(id, text);
    p = put_text(p, "MID", text, 36);
    p = put_text(p, "TYP", (const unsigned char *)"ACK", 3);
    *p++ = 3;
    memcpy(p, "PLD", 3);
    p += 3;
    *p++ = FT_FRAME;
    p = put32(p, (uint32_t)pld);
    *p++ = 3;
    memcpy(p, "seq", 3);
    p += 3;
    if (wide) {
        *p++ = FT_S64;
        p = put32(p, (uint32_t)(seq >> 32));
        p = put32(p, (uint32_t)seq);
    } else {
        *p++ = FT_U32;
        p = put32(p, (uint32_t)seq);
    }
    p = put_text(p, "SRC", central, central_n);
    if (h->start[H_TRC] >= 0) p = put_text(p, "TRC", buf + h->start[H_TRC], span_len(h, H_TRC));
    return ack;
}

/* The Latin-1 text of a span, the cached one when it holds the same bytes (a publisher's runs
 * name one inbox and one type). Returns a new reference. */
static PyObject *
cached_text(PyObject **cache, const unsigned char *buf, const Header *h, int kind)
{
    Py_ssize_t n = span_len(h, kind);
    const unsigned char *p = buf + h->start[kind];
    PyObject *last = *cache;
    if (last != NULL && PyUnicode_GET_LENGTH(last) == n && PyUnicode_KIND(last) == PyUnicode_1BYTE_KIND
        && memcmp(PyUnicode_1BYTE_DATA(last), p, (size_t)n) == 0)
        return Py_NewRef(last);
    PyObject *text = PyUnicode_DecodeLatin1((const char *)p, n, NULL);
    if (text == NULL) return NULL;
    Py_XSETREF(*cache, Py_NewRef(text));
    return text;
}

PyObject *
confirm_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 26) {
        PyErr_SetString(PyExc_TypeError, "confirm_run() takes 26 arguments");
        return NULL;
    }
    PyObject *office_text = args[9], *seen = args[10], *now = args[12];
    PyObject *window = args[13], *record = args[14], *ts = args[15], *pending = args[16];
    PyObject *subscribers = args[17], *deliver = args[18], *with_seq = args[19], *ids = args[20];
    PyObject *held = args[22], *conn = args[23], *ready = args[24], *central = args[25];
    RunArgs run;
    if (parse_run_args(args, "confirm_run", &run) < 0) return NULL;
    if (!PyUnicode_Check(office_text) || !PyDict_Check(seen) || !PyList_CheckExact(pending)
        || !PyBytes_Check(ids) || !PyList_CheckExact(held) || !PyUnicode_Check(central)
        || !PyUnicode_IS_ASCII(central)) {
        PyErr_SetString(PyExc_TypeError, "confirm_run(): bad argument types");
        return NULL;
    }
    Py_ssize_t entries = PyLong_AsSsize_t(args[11]), ids_pos = PyLong_AsSsize_t(args[21]);
    if (PyErr_Occurred()) return NULL;
    long long seq, reserved, offset, max_segment, block_end, max_record;
    if (!PyArg_ParseTuple(window, "LLLLLL", &seq, &reserved, &offset, &max_segment, &block_end,
                          &max_record))
        return NULL;
    const unsigned char *central_text = PyUnicode_1BYTE_DATA(central);
    Py_ssize_t central_n = PyUnicode_GET_LENGTH(central);
    PyObject *bodies = run.bodies;
    Py_ssize_t count = run.end, i = run.start, dropped = 0;
    int evicted = 0;
    PyObject *grp_cache = NULL, *inbox_cache = NULL, *quiet_grp = NULL; /* quiet: nobody listens */
    PyObject *seq_obj = NULL, *mid = NULL, *key = NULL, *rec = NULL;
    PyObject *error = NULL;
    while (i < count) {
        PyObject *raw = PyList_GET_ITEM(bodies, i);
        if (!PyBytes_CheckExact(raw)) break;
        Py_ssize_t n = PyBytes_GET_SIZE(raw);
        if (n == 0 || n > run.max_size || n > max_record) break;
        const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(raw);
        Header h;
        int enc, quirks;
        Py_ssize_t left;
        if (!read_head(buf, n, run.max_depth, run.max_fields, 0, &h, &enc, &quirks, &left)
            || enc != 0)
            break;
        Py_ssize_t grp_n = span_len(&h, H_GRP);
        if (!span_is(buf, &h, H_TYP, "EVT", 3) || h.start[H_RPY] < 0 || h.start[H_TGT] >= 0
            || h.start[H_GRP] < 0 || grp_n == 0 || grp_n > run.max_name
            || reserved_type(buf + h.start[H_GRP], grp_n)
            || !stamped(buf, &h, 0, run.office, run.office_n, run.trusted)
            || !ascii_span(buf, &h, H_RPY) || !ascii_span(buf, &h, H_MID)
            || !ascii_span(buf, &h, H_TRC))
            break; /* the one-by-one lane takes it */
        if (seq + 1 > reserved || offset >= block_end || ids_pos < 0
            || ids_pos + 16 > PyBytes_GET_SIZE(ids))
            break; /* the journal's own path (a reservation, a new index block), more ids */
        if (h.start[H_MID] >= 0) {
            mid = PyUnicode_DecodeLatin1((const char *)buf + h.start[H_MID], span_len(&h, H_MID),
                                         NULL);
            if (mid == NULL) goto fail;
            key = PyTuple_Pack(2, office_text, mid);
            if (key == NULL) goto fail;
            int known = PyDict_Contains(seen, key);
            if (known < 0) goto fail;
            if (known) break; /* a retry: answered by the one-by-one lane */
        }
        seq_obj = PyLong_FromLongLong(seq + 1);
        if (seq_obj == NULL) goto fail;
        rec = PyObject_CallFunctionObjArgs(record, raw, ts, seq_obj, NULL);
        if (rec == NULL) goto fail;
        if (!PyBytes_Check(rec)) {
            PyErr_SetString(PyExc_TypeError, "confirm_run(): a record is bytes");
            goto fail;
        }
        Py_ssize_t size = PyBytes_GET_SIZE(rec);
        if (offset + size > max_segment) break; /* the journal's own path starts a segment */
        /* Taken: from here on, what fails is reported with this body counted. */
        if (PyList_Append(pending, rec) < 0) goto fail;
        Py_CLEAR(rec);
        seq += 1;
        offset += size;
        i++;
        int delivered = 0;
        PyObject *grp = cached_text(&grp_cache, buf, &h, H_GRP);
        if (grp == NULL) goto fail_taken;
        if (grp == quiet_grp) {
            dropped++; /* nobody listened a moment ago, and nothing ran since */
        } else {
            PyObject *numbers = PyObject_CallOneArg(subscribers, grp);
            if (numbers == NULL) { Py_DECREF(grp); goto fail_taken; }
            int some = PyObject_IsTrue(numbers);
            if (some > 0) {
                PyObject *zero = PyLong_FromLong(0);
                PyObject *body = zero == NULL ? NULL
                    : PyObject_CallFunctionObjArgs(with_seq, raw, zero, seq_obj, NULL);
                Py_XDECREF(zero);
                PyObject *done = body == NULL ? NULL
                    : PyObject_CallFunctionObjArgs(deliver, numbers, body, NULL);
                Py_XDECREF(body);
                if (done == NULL) some = -1;
                Py_XDECREF(done);
                delivered = 1;
                Py_CLEAR(quiet_grp);
            } else if (some == 0) {
                dropped++;
                Py_XSETREF(quiet_grp, Py_NewRef(grp));
            }
            Py_DECREF(numbers);
            if (some < 0) { Py_DECREF(grp); goto fail_taken; }
        }
        Py_DECREF(grp);
        if (key != NULL) {
            PyObject *value = PyTuple_Pack(2, seq_obj, now);
            if (value == NULL) goto fail_taken;
            int failed = PyObject_SetItem(seen, key, value);
            Py_DECREF(value);
            if (failed < 0) goto fail_taken;
            if (PyDict_GET_SIZE(seen) > entries) {
                PyObject *gone = PyObject_CallMethodOneArg(seen, S_popitem, Py_False);
                if (gone == NULL) goto fail_taken;
                Py_DECREF(gone);
                evicted = 1;
            }
        }
        const unsigned char *id = (const unsigned char *)PyBytes_AS_STRING(ids) + ids_pos;
        ids_pos += 16;
        PyObject *ack = ack_bytes(buf, &h, id, central_text, central_n, (unsigned long long)seq);
        if (ack == NULL) goto fail_taken;
        PyObject *inbox = cached_text(&inbox_cache, buf, &h, H_RPY);
        if (inbox == NULL) { Py_DECREF(ack); goto fail_taken; }
        PyObject *entry = PyTuple_New(4);
        if (entry == NULL) { Py_DECREF(ack); Py_DECREF(inbox); goto fail_taken; }
        PyTuple_SET_ITEM(entry, 0, seq_obj);
        PyTuple_SET_ITEM(entry, 1, inbox);
        PyTuple_SET_ITEM(entry, 2, ack);
        PyTuple_SET_ITEM(entry, 3, Py_NewRef(raw));
        seq_obj = NULL; /* the entry holds it */
        int failed = PyList_Append(held, entry);
        Py_DECREF(entry);
        if (failed < 0) goto fail_taken;
        Py_CLEAR(mid);
        Py_CLEAR(key);
        if (delivered) {
            PyObject *state = PyObject_GetAttr(conn, S_state);
            if (state == NULL) goto fail_taken;
            Py_DECREF(state);
            if (state != ready) break; /* routing closed the sender's link: the rest is not read */
        }
    }
    goto done;
fail_taken:
    /* i already counts the body being answered */
fail:
    {
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        PyErr_NormalizeException(&type, &value, &trace);
        if (value != NULL && trace != NULL) PyException_SetTraceback(value, trace);
        error = value != NULL ? value : Py_NewRef(Py_None);
        Py_XDECREF(type);
        Py_XDECREF(trace);
    }
done:
    Py_XDECREF(seq_obj);
    Py_XDECREF(mid);
    Py_XDECREF(key);
    Py_XDECREF(rec);
    Py_XDECREF(grp_cache);
    Py_XDECREF(inbox_cache);
    Py_XDECREF(quiet_grp);
    PyObject *result = Py_BuildValue("(nLLnnON)", i, seq, offset, ids_pos, dropped,
                                     evicted ? Py_True : Py_False,
                                     error != NULL ? error : Py_NewRef(Py_None));
    return result;
}
