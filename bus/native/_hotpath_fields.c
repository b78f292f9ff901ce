/*
 * A message's header fields as attributes, part of the bus.native._hotpath accelerator
 * (docs/PROTOCOL.md 5.1, the routing header; bus/message/message_fields.py holds the reference).
 *
 * HeadField is the base class of bus.message_fields._Text and _Number, the descriptors behind
 * Message.mid, .rid, .grp, .typ, .flg and the others. Its __get__ answers a message still on
 * the wire from its routing Header (a tuple: the field at `index`) without a Python frame;
 * every other case (no Header, a field the Header does not hold, the descriptor read on the
 * class) is the subclass's `_read(obj)`, the reference itself. Every message a gateway, a
 * service or a client receives is read this way several times, each read a Python call before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    Py_ssize_t index; /* where the Header holds the field; -1: it does not */
} HeadField;

static PyObject *S_head, *S_read;

static PyObject *
head_field_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    Py_ssize_t index = ((HeadField *)self)->index;
    if (index >= 0) {
        PyObject *head = PyObject_GetAttr(obj, S_head);
        if (head == NULL) return NULL;
        if (PyTuple_Check(head) && index < PyTuple_GET_SIZE(head)) {
            PyObject *value = Py_NewRef(PyTuple_GET_ITEM(head, index));
            Py_DECREF(head);
            return value;
        }
        Py_DECREF(head);
    }
    return PyObject_CallMethodOneArg(self, S_read, obj);
}

static void
head_field_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *
head_field_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    PyObject *self = type->tp_alloc(type, 0);
    if (self != NULL) ((HeadField *)self)->index = -1; /* until the subclass says where */
    return self;
}

static PyMemberDef head_field_members[] = {
    {"index", T_PYSSIZET, offsetof(HeadField, index), 0,
     "Where a message's routing Header holds the field (-1: it does not)."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot head_field_slots[] = {
    {Py_tp_doc, "A header field read from a message's routing Header, else by _read(obj)."},
    {Py_tp_descr_get, head_field_get},
    {Py_tp_new, head_field_new},
    {Py_tp_dealloc, head_field_dealloc},
    {Py_tp_members, head_field_members},
    {0, NULL},
};

static PyType_Spec head_field_spec = {
    "bus.native._hotpath.HeadField",
    sizeof(HeadField),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    head_field_slots,
};

int
head_field_add(PyObject *module)
{
    S_head = PyUnicode_InternFromString("_head");
    S_read = PyUnicode_InternFromString("_read");
    if (S_head == NULL || S_read == NULL) return -1;
    PyObject *type = PyType_FromSpec(&head_field_spec);
    if (type == NULL) return -1;
    if (PyModule_AddObject(module, "HeadField", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}
