/* _entry.h: the per-function Entry of _fastcall.c (included by it, after _dlpack.h and
 * _results.h): the slot of each tensor (its buffer formats, item size, dims, descriptor
 * word, index bound, DLPack dtype), the descriptor template, and the Python type that
 * runtime/library.py builds once per function.  _fastcall.c's call() and fresh() read them.
 */
typedef int32_t (*packed_fn)(void **);

#define MAX_FORMATS 4

typedef struct {
    char formats[MAX_FORMATS + 1];  /* accepted buffer format letters ("f"; "ql" for I64) */
    Py_ssize_t itemsize;
    int writable;         /* an out= buffer */
    int ndim;
    Py_ssize_t word;      /* index of the descriptor's `allocated` word */
    Py_ssize_t *dims;     /* ndim entries, into Entry.dims */
    long long bound;      /* an I64 index parameter: every element in [0, bound); else -1 */
    int dl_code, dl_bits; /* its DLPack dtype (_dlpack.h); dl_code -1: DLPack objects decline */
} Slot;

typedef struct {
    PyObject_HEAD
    packed_fn fn;
    Py_ssize_t n_slots;
    Py_ssize_t n_inputs;    /* the slots before the first output */
    Py_ssize_t n_extra;     /* template words whose addresses follow the descriptors' */
    Py_ssize_t *extra;
    Py_ssize_t n_words;
    int64_t *template_words;
    Slot *slots;
    Py_ssize_t *dims;
    PyTypeObject *array_type;  /* numpy.ndarray: other buffers take the Python path */
} Entry;

static PyTypeObject EntryType;

#define SLOT_SPEC "(formats, itemsize, writable, shape, word, bound[, dlpack])"

/* ---- formats ---------------------------------------------------------------------- */
static int
is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* Whether a buffer's format string is one letter of `formats`, with at most a
 * native byte-order prefix ('@', '=', or '<'/'>' matching the host).  (I64
 * arrays report 'l' on LP64 platforms and 'q' elsewhere; the item size check
 * rules out a 4-byte 'l'.) */
static int
format_matches(const char *fmt, const char *formats)
{
    if (fmt == NULL)
        return 0;                      /* NULL means unsigned bytes */
    if (*fmt == '@' || *fmt == '=' || *fmt == (is_little_endian() ? '<' : '>'))
        fmt++;
    if (fmt[0] == '\0' || fmt[1] != '\0')
        return 0;
    for (; *formats; formats++)        /* at most MAX_FORMATS letters: cheaper than strchr */
        if (*formats == fmt[0])
            return 1;
    return 0;
}

static int
view_matches(const Slot *slot, const Py_buffer *view)
{
    if (view->itemsize != slot->itemsize || view->ndim != slot->ndim
        || !format_matches(view->format, slot->formats))
        return 0;
    /* Compiled code assumes naturally aligned elements. */
    if (((uintptr_t)view->buf & (uintptr_t)(slot->itemsize - 1)) != 0)
        return 0;
    for (int d = 0; d < slot->ndim; d++)
        if (view->shape[d] != slot->dims[d])
            return 0;
    return 1;
}

/* Every element of an index parameter in [0, bound) (one unsigned compare each). */
static int
indices_in_bounds(const Slot *slot, const void *buf, Py_ssize_t len)
{
    const int64_t *ids = (const int64_t *)buf;
    Py_ssize_t n = len / (Py_ssize_t)sizeof(int64_t);
    uint64_t bound = (uint64_t)slot->bound;
    for (Py_ssize_t i = 0; i < n; i++)
        if ((uint64_t)ids[i] >= bound)
            return 0;
    return 1;
}

/* The first output whose bytes overlap an earlier array's (every input, and the
 * outputs before it: runtime/library.py puts outputs last), or -1.  The buffers are
 * C-contiguous, so [lo, hi) is exactly the memory each one covers (an empty one is
 * [UINTPTR_MAX, 0), which overlaps nothing).  The inner loop is branch-free. */
static Py_ssize_t
first_aliased_output(const Entry *e, const uintptr_t *lo, const uintptr_t *hi)
{
    for (Py_ssize_t i = 0; i < e->n_slots; i++) {
        if (!e->slots[i].writable)
            continue;
        const uintptr_t a = lo[i], b = hi[i];
        Py_ssize_t overlaps = 0;
        for (Py_ssize_t k = 0; k < i; k++)
            overlaps += (a < hi[k]) & (lo[k] < b);
        if (overlaps)
            return i;
    }
    return -1;
}

/* ---- Entry ------------------------------------------------------------------------ */
static void
Entry_dealloc(Entry *self)
{
    PyMem_Free(self->template_words);
    PyMem_Free(self->slots);
    PyMem_Free(self->dims);
    PyMem_Free(self->extra);
    Py_XDECREF(self->array_type);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* One slot from (formats: str, itemsize: int, writable: bool, shape: tuple[int],
 * word: int, bound: int[, dlpack: int]), dlpack the DLPack dtype as code << 8 | bits
 * (-1 or absent: DLPack objects take the Python path). */
static int
parse_slot(Entry *self, Py_ssize_t i, PyObject *item, Py_ssize_t *next_dim)
{
    const char *formats;
    Py_ssize_t itemsize, word;
    int writable;
    PyObject *shape;
    long long bound, dlpack = -1;
    if (!PyArg_ParseTuple(item, "snpO!nL|L;" SLOT_SPEC, &formats, &itemsize, &writable,
                          &PyTuple_Type, &shape, &word, &bound, &dlpack))
        return -1;
    Slot *slot = &self->slots[i];
    if (dlpack >= 0 && ((dlpack & 0xff) != 8 * itemsize || dlpack >> 8 > 0xff)) {
        PyErr_Format(PyExc_ValueError, "slot %zd: DLPack dtype %lld is not code << 8 | bits of a %zd-byte item",
                     i, dlpack, itemsize);
        return -1;
    }
    slot->dl_code = dlpack < 0 ? -1 : (int)(dlpack >> 8);
    slot->dl_bits = dlpack < 0 ? 0 : (int)(dlpack & 0xff);
    size_t n_formats = strlen(formats);
    if (n_formats == 0 || n_formats > MAX_FORMATS) {
        PyErr_Format(PyExc_ValueError, "slot %zd: no buffer format letters (this dtype takes the "
                     "Python path)", i);
        return -1;
    }
    memcpy(slot->formats, formats, n_formats + 1);
    if (itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8) {
        PyErr_Format(PyExc_ValueError, "slot %zd: item size %zd is not 1, 2, 4 or 8", i, itemsize);
        return -1;
    }
    slot->itemsize = itemsize;
    if (bound >= 0 && (itemsize != 8 || writable)) {
        PyErr_Format(PyExc_ValueError, "slot %zd: only an 8-byte input may have an index bound", i);
        return -1;
    }
    slot->bound = bound < 0 ? -1 : bound;
    slot->writable = writable;
    slot->ndim = (int)PyTuple_GET_SIZE(shape);
    slot->word = word;
    slot->dims = self->dims + *next_dim;
    for (int d = 0; d < slot->ndim; d++) {
        slot->dims[d] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
        if (slot->dims[d] == -1 && PyErr_Occurred())
            return -1;
    }
    *next_dim += slot->ndim;
    /* allocated, aligned, offset, sizes[R], strides[R] must lie inside the template */
    if (word < 0 || word + 3 + 2 * (Py_ssize_t)slot->ndim > self->n_words) {
        PyErr_Format(PyExc_ValueError, "slot %zd: descriptor at word %zd overruns the template", i, word);
        return -1;
    }
    return 0;
}

static int
count_dims(PyObject *slots, Py_ssize_t *total)
{
    *total = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(slots); i++) {
        PyObject *item = PyTuple_GET_ITEM(slots, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 6 || PyTuple_GET_SIZE(item) > 7
            || !PyTuple_Check(PyTuple_GET_ITEM(item, 3))) {
            PyErr_Format(PyExc_TypeError, "slot %zd is not " SLOT_SPEC, i);
            return -1;
        }
        *total += PyTuple_GET_SIZE(PyTuple_GET_ITEM(item, 3));
    }
    return 0;
}

/* The template word offsets of `extra` (None: none); each must lie inside the template. */
static int
parse_extra(Entry *self, PyObject *extra)
{
    for (Py_ssize_t j = 0; j < self->n_extra; j++) {
        Py_ssize_t word = PyLong_AsSsize_t(PyTuple_GET_ITEM(extra, j));
        if (word == -1 && PyErr_Occurred())
            return -1;
        if (word < 0 || word >= self->n_words) {
            PyErr_Format(PyExc_ValueError, "extra %zd: word %zd is outside the template", j, word);
            return -1;
        }
        self->extra[j] = word;
    }
    return 0;
}

static PyObject *
Entry_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fnptr", "template", "slots", "array_type", "extra", NULL};
    PyObject *fnptr, *slots, *array_type, *extra = NULL;
    Py_buffer template_view;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!y*O!O!|O!:Entry", kwlist, &PyLong_Type, &fnptr,
                                     &template_view, &PyTuple_Type, &slots, &PyType_Type, &array_type,
                                     &PyTuple_Type, &extra))
        return NULL;
    Entry *self = (Entry *)type->tp_alloc(type, 0);
    Py_ssize_t n_dims;
    if (self == NULL)
        goto fail;
    Py_INCREF(array_type);
    self->array_type = (PyTypeObject *)array_type;
    self->fn = (packed_fn)(uintptr_t)PyLong_AsVoidPtr(fnptr);
    if (self->fn == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "null function pointer");
        goto fail;
    }
    if (template_view.len % 8 != 0) {
        PyErr_SetString(PyExc_ValueError, "the template is not a whole number of int64 words");
        goto fail;
    }
    self->n_words = template_view.len / 8;
    self->n_slots = PyTuple_GET_SIZE(slots);
    self->n_extra = extra ? PyTuple_GET_SIZE(extra) : 0;
    if (count_dims(slots, &n_dims) < 0)
        goto fail;
    self->template_words = PyMem_Malloc(template_view.len ? template_view.len : 1);
    self->slots = PyMem_Calloc(self->n_slots ? self->n_slots : 1, sizeof(Slot));
    self->dims = PyMem_Calloc(n_dims ? n_dims : 1, sizeof(Py_ssize_t));
    self->extra = PyMem_Calloc(self->n_extra ? self->n_extra : 1, sizeof(Py_ssize_t));
    if (!self->template_words || !self->slots || !self->dims || !self->extra) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(self->template_words, template_view.buf, template_view.len);
    if (parse_extra(self, extra) < 0)
        goto fail;
    Py_ssize_t next_dim = 0;
    for (Py_ssize_t i = 0; i < self->n_slots; i++) {
        if (parse_slot(self, i, PyTuple_GET_ITEM(slots, i), &next_dim) < 0)
            goto fail;
        if (i > 0 && self->slots[i - 1].writable && !self->slots[i].writable) {
            /* first_aliased_output and fresh() rely on it */
            PyErr_Format(PyExc_ValueError, "slot %zd: an input after an output (inputs come first)", i);
            goto fail;
        }
        if (!self->slots[i].writable)
            self->n_inputs = i + 1;
    }
    PyBuffer_Release(&template_view);
    return (PyObject *)self;
fail:
    PyBuffer_Release(&template_view);
    Py_XDECREF(self);
    return NULL;
}

static PyObject *
Entry_repr(Entry *self)
{
    return PyUnicode_FromFormat("<_fastcall.Entry: %zd tensors, %zd extra pointers, %zd descriptor words>",
                                self->n_slots, self->n_extra, self->n_words);
}

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "compiler._fastcall.Entry",
    .tp_doc = PyDoc_STR("Entry(fnptr, template, slots, array_type, extra=()): a packed entry point prepared for call().\n\n"
                        "fnptr: address of int32_t f(void **descriptors); template: bytes of the\n"
                        "int64 descriptor words (pointers zero); slots: one (formats, itemsize,\n"
                        "writable, shape, word, bound) per tensor, inputs then outputs: formats the\n"
                        "buffer format letters its dtype's arrays export (types.DType.buffer_formats),\n"
                        "word the index of the descriptor's first word in the template, bound the\n"
                        "exclusive upper bound of an I64 index input (-1: none);\n"
                        "array_type: the type (or base type) every array must have;\n"
                        "extra: template word offsets whose addresses (in the per-call copy) follow\n"
                        "the descriptors' in the pointer array (a dynamic function's sizes block)."),
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Entry_new,
    .tp_dealloc = (destructor)Entry_dealloc,
    .tp_repr = (reprfunc)Entry_repr,
};
