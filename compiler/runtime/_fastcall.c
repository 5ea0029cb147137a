/* _fastcall: the checked fast path of compiler.runtime.
 *
 * A compiled Kina function is called through its packed entry point
 * `int32_t _kina_packed_kina_f(void **descriptors)` (compiler/backend/entry_points.py:
 * 0, or an error code: a failed bounds check, a descriptor of other sizes), one
 * memref descriptor per tensor, inputs then caller-owned outputs:
 *
 *     { T *allocated; T *aligned; int64 offset; int64 sizes[R]; int64 strides[R] }
 *
 * runtime/library.py prepares an `Entry` (_entry.h) once per function: the packed function
 * pointer, a template of every descriptor (offsets, sizes and strides filled
 * in, pointers zero) and one slot per tensor (the buffer format letters and
 * item size of its dtype, from compiler.types.DType, so this file has no dtype
 * table of its own; writability; dims; where its descriptor starts in the
 * template; the exclusive bound of an I64 index parameter, or -1) and the
 * array type (ndarray).
 * `call(entry, arrays)` then, for each array of that type, takes a buffer
 * (PyBUF_C_CONTIGUOUS | PyBUF_FORMAT, plus PyBUF_WRITABLE for outputs),
 * checks its format, item size, alignment, rank and dims against the slot
 * (and every element of a bounded index parameter against 0 <= id < bound),
 * and writes its address into a copy of the
 * template on the C stack (a per-call block: concurrent calls share nothing).
 * An output whose memory overlaps any other array (out= aliasing an input or
 * another output) is a mismatch too: the Python path copies or refuses.
 * Only when every array matches is the function called; the buffers are held
 * until it returns, so no array can be resized under it, and the GIL is
 * released when the call touches enough data to be worth it.
 *
 * A dynamic function (docs: /work/scratch/dyn_abi.md, compiler/runtime/binding.py)
 * takes its size values too: `extra`, a tuple of template word offsets, appends
 * the address of each of those words inside the per-call copy to the pointer
 * array after the n descriptors (args[n] -> the int64 sizes block).  The entry
 * is prepared per set of shapes, so the sizes words are part of the template
 * and nothing is written to them per call.
 *
 * It returns -1 after a call that returned 0, -1 - code after a call that
 * returned an error code, or the index of the first argument that does not
 * match, WITHOUT calling: runtime/library.py then runs its Python checks, which convert
 * what may be converted and name the parameter (and a bad index value) in a
 * KinaArgumentError / KinaIndexError.  Only the Python C API and the buffer
 * protocol are used (no NumPy headers); BF16 and F8 arrays (ml_dtypes) export
 * no buffer format and take the Python path.
 *
 * An argument of another type that implements DLPack (torch, JAX, any `__dlpack__`
 * producer) is read and checked by _dlpack.h, through the library's C exchange API
 * or a consumed capsule, against the slot's DLPack dtype (code << 8 | bits, the
 * optional seventh item of a slot): the same checks, no copy, no Python call for a
 * torch.Tensor but its `requires_grad` and `is_neg()` (their C functions called
 * directly); what does not match takes the Python path.
 * (A torch tensor, unlike an ndarray, cannot be pinned against `resize_()` from
 * another thread while the GIL is released; resizing a tensor a call is using is
 * the caller's race, as with any torch extension.)
 *
 * `fresh(entry, inputs, kind)` is call() for `lib.f(x, like="torch")`: the inputs are taken
 * and checked as above, the outputs allocated here (_results.h: one malloc block each, which
 * overlaps nothing) and, after a call that returned 0, returned as tensors of `kind` made by
 * its DLPack C exchange API; else it returns call()'s int and frees them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_dlpack.h"
#include "_results.h"

/* Calls reading or writing more than this many bytes release the GIL: below
 * it the release/reacquire (~0.1 us) costs more than other threads gain. */
#define RELEASE_GIL_BYTES (64 * 1024)

/* Per-call scratch lives on the C stack up to these sizes (StoryLM-0: 18
 * tensors, ~150 words); larger functions use the heap. */
#define STACK_SLOTS 32
#define STACK_WORDS 512

#include "_entry.h"

/* ---- call ------------------------------------------------------------------------- */
/* One foreign (DLPack) array for slot i (_dlpack.h): 1 with *buf, *len set, or 0. */
static int
bind_foreign(const Slot *slot, PyObject *array, Held *held, void **buf, Py_ssize_t *len)
{
    DLTensor borrowed;
    if (slot->dl_code < 0)
        return 0;
    return take_foreign(array, slot->ndim, slot->dims, slot->dl_code, slot->dl_bits, slot->itemsize,
                        slot->writable, held, &borrowed, buf, len);
}

/* Take and check arrays[0..n) against slots 0..n, writing each address into `block`.
 * Returns the index of the first mismatch, or -1; *taken says how many entries of `held`
 * must be released; lo/hi[i] the span of array i. */
static Py_ssize_t
bind(Entry *e, PyObject *arrays, Py_ssize_t n, int64_t *block, void **packed, Held *held,
     uintptr_t *lo, uintptr_t *hi, Py_ssize_t *taken, Py_ssize_t *total_bytes)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        const Slot *slot = &e->slots[i];
        PyObject *array = PyTuple_GET_ITEM(arrays, i);
        void *buf;
        Py_ssize_t len;
        held[i].kind = HELD_NONE;
        *taken = i + 1;
        if (PyObject_TypeCheck(array, e->array_type)) {
            int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (slot->writable ? PyBUF_WRITABLE : 0);
            if (PyObject_GetBuffer(array, &held[i].view, flags) < 0) {
                PyErr_Clear();    /* not contiguous/writable: the Python path says which */
                return i;
            }
            held[i].kind = HELD_BUFFER;
            if (!view_matches(slot, &held[i].view))
                return i;
            buf = held[i].view.buf;
            len = held[i].view.len;
        } else if (!bind_foreign(slot, array, &held[i], &buf, &len)) {
            return i;             /* not an array, or a DLPack object that does not match */
        }
        if (slot->bound >= 0 && !indices_in_bounds(slot, buf, len))
            return i;
        block[slot->word] = block[slot->word + 1] = (int64_t)(intptr_t)buf;
        packed[i] = &block[slot->word];
        *total_bytes += len;
        lo[i] = len ? (uintptr_t)buf : UINTPTR_MAX;
        hi[i] = len ? (uintptr_t)buf + (uintptr_t)len : 0;
    }
    return -1;
}

/* The per-call scratch: on the C stack up to STACK_WORDS / STACK_SLOTS, else on the heap. */
typedef struct {
    int64_t *block;                 /* the copy of the template */
    void **packed;                  /* the pointer array the entry point takes */
    Held *held;
    uintptr_t *spans;               /* [lo..., hi...] of every buffer */
    DLManagedTensorVersioned **results;   /* fresh(): the blocks of the outputs */
    int64_t stack_block[STACK_WORDS];
    void *stack_packed[STACK_SLOTS];
    Held stack_held[STACK_SLOTS];
    uintptr_t stack_spans[2 * STACK_SLOTS];
    DLManagedTensorVersioned *stack_results[STACK_SLOTS];
} Scratch;

/* 0, or -1 with MemoryError set (scratch_free is due either way). */
static int
scratch_init(Scratch *s, const Entry *e)
{
    s->block = s->stack_block;
    s->packed = s->stack_packed;
    s->held = s->stack_held;
    s->spans = s->stack_spans;
    s->results = s->stack_results;
    if (e->n_words > STACK_WORDS)
        s->block = PyMem_Malloc(e->n_words * sizeof(int64_t));
    if (e->n_slots + e->n_extra > STACK_SLOTS) {
        s->packed = PyMem_Malloc((e->n_slots + e->n_extra) * sizeof(void *));
        s->held = PyMem_Malloc(e->n_slots * sizeof(Held));
        s->spans = PyMem_Malloc(2 * e->n_slots * sizeof(uintptr_t));
        s->results = PyMem_Malloc(e->n_slots * sizeof(DLManagedTensorVersioned *));
    }
    if (!s->block || !s->packed || !s->held || !s->spans || !s->results) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(s->block, e->template_words, e->n_words * sizeof(int64_t));
    return 0;
}

static void
scratch_free(Scratch *s)
{
    if (s->block != s->stack_block)
        PyMem_Free(s->block);
    if (s->packed != s->stack_packed) {
        PyMem_Free(s->packed);
        PyMem_Free(s->held);
        PyMem_Free(s->spans);
        PyMem_Free(s->results);
    }
}

/* Call the entry point on the bound scratch (the GIL released for a large call): -1, or
 * -1 - the error code it returned. */
static Py_ssize_t
invoke(const Entry *e, Scratch *s, Py_ssize_t total_bytes)
{
    for (Py_ssize_t j = 0; j < e->n_extra; j++)
        s->packed[e->n_slots + j] = &s->block[e->extra[j]];
    int32_t code;
    if (total_bytes > RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        code = e->fn(s->packed);
        Py_END_ALLOW_THREADS
    } else {
        code = e->fn(s->packed);
    }
    return code > 0 ? -1 - (Py_ssize_t)code : -1;
}

PyDoc_STRVAR(call_doc,
"call(entry, arrays) -> int\n\n"
"Check every array of the tuple against the entry's slots and, if all match, call\n"
"the function and return -1 (-1 - code when it returns an error code); else return the index of the first mismatch (an arity\n"
"mismatch gives min(len(arrays), number of slots); an index out of its bound, the\n"
"index of that input; an output overlapping another array, that output) without calling.");

static PyObject *
fastcall_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyObject_TypeCheck(args[0], &EntryType) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "call(entry: Entry, arrays: tuple)");
        return NULL;
    }
    Entry *e = (Entry *)args[0];
    PyObject *arrays = args[1];
    Py_ssize_t n = PyTuple_GET_SIZE(arrays);
    if (n != e->n_slots)
        return PyLong_FromSsize_t(n < e->n_slots ? n : e->n_slots);

    Scratch s;
    PyObject *result = NULL;
    if (scratch_init(&s, e) == 0) {
        Py_ssize_t taken = 0, total_bytes = 0;
        uintptr_t *lo = s.spans, *hi = s.spans + e->n_slots;
        Py_ssize_t bad = bind(e, arrays, n, s.block, s.packed, s.held, lo, hi, &taken, &total_bytes);
        if (bad < 0)
            bad = first_aliased_output(e, lo, hi);
        if (bad < 0)
            bad = invoke(e, &s, total_bytes);
        for (Py_ssize_t i = 0; i < taken; i++)
            release_held(&s.held[i]);
        result = PyLong_FromSsize_t(bad);
    }
    scratch_free(&s);
    return result;
}

/* fresh(): allocate the outputs (slots n_inputs..) into s->results and the block; the index
 * of an output no block can be made for (a dtype without DLPack code), -1, or NO_MEMORY
 * with MemoryError set.  *made says how many blocks exist. */
#define NO_MEMORY PY_SSIZE_T_MIN
static Py_ssize_t
allocate_outputs(const Entry *e, Scratch *s, Py_ssize_t *made, Py_ssize_t *total_bytes)
{
    for (Py_ssize_t i = e->n_inputs; i < e->n_slots; i++) {
        const Slot *slot = &e->slots[i];
        if (slot->dl_code < 0)
            return i;
        Py_ssize_t nbytes = slot->itemsize;
        for (int d = 0; d < slot->ndim; d++)
            nbytes *= slot->dims[d];
        void *data;
        DLManagedTensorVersioned *m = result_alloc(slot->ndim, slot->dims, slot->dl_code, slot->dl_bits, nbytes, &data);
        if (m == NULL)
            return NO_MEMORY;
        s->results[(*made)++] = m;
        s->block[slot->word] = s->block[slot->word + 1] = (int64_t)(intptr_t)data;
        s->packed[i] = &s->block[slot->word];
        *total_bytes += nbytes;
    }
    return -1;
}

/* The results of fresh(): the one tensor, or a tuple of them (NULL with an error set).
 * Every block is given away (or, after a failure, freed). */
static PyObject *
wrap_results(const DLPackExchangeAPI *api, DLManagedTensorVersioned **blocks, Py_ssize_t n)
{
    if (n == 1)
        return result_tensor(api, blocks[0]);
    PyObject *tuple = PyTuple_New(n);
    Py_ssize_t k = 0;
    for (; tuple != NULL && k < n; k++) {
        PyObject *t = result_tensor(api, blocks[k]);
        if (t == NULL) {
            Py_CLEAR(tuple);
            k++;              /* result_tensor kept (or leaked) that block */
            break;
        }
        PyTuple_SET_ITEM(tuple, k, t);
    }
    for (; k < n; k++)
        result_free(blocks[k]);
    return tuple;
}

PyDoc_STRVAR(fresh_doc,
"fresh(entry, inputs, kind) -> results or int\n\n"
"call(entry, inputs + outputs) with the outputs allocated here, in C, and returned as\n"
"tensors of `kind` (a type whose DLPack C exchange API makes tensors: allocates(kind)),\n"
"row-major over memory of their own: the one result, or a tuple of them.  When the inputs\n"
"do not match or the function returns an error code, nothing is returned but the int\n"
"call() would return (the index of the first input that does not match, or -1 - code),\n"
"and the outputs are freed.");

static PyObject *
fastcall_fresh(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyObject_TypeCheck(args[0], &EntryType) || !PyTuple_Check(args[1]) || !PyType_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "fresh(entry: Entry, inputs: tuple, kind: type)");
        return NULL;
    }
    Entry *e = (Entry *)args[0];
    PyObject *inputs = args[1];
    const DLPackExchangeAPI *api = allocating_api((PyTypeObject *)args[2]);
    if (api == NULL) {
        PyErr_Format(PyExc_TypeError, "fresh: %R publishes no DLPack C exchange API that makes tensors", args[2]);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(inputs);
    if (n != e->n_inputs || e->n_inputs == e->n_slots)
        return PyLong_FromSsize_t(n < e->n_inputs ? n : e->n_inputs);

    Scratch s;
    PyObject *result = NULL;
    Py_ssize_t made = 0;
    if (scratch_init(&s, e) == 0) {
        Py_ssize_t taken = 0, total_bytes = 0;
        Py_ssize_t bad = bind(e, inputs, n, s.block, s.packed, s.held, s.spans, s.spans + e->n_slots,
                              &taken, &total_bytes);
        if (bad < 0)      /* fresh memory: no output can overlap anything */
            bad = allocate_outputs(e, &s, &made, &total_bytes);
        if (bad == -1)
            bad = invoke(e, &s, total_bytes);
        for (Py_ssize_t i = 0; i < taken; i++)
            release_held(&s.held[i]);
        if (bad == -1) {
            result = wrap_results(api, s.results, made);
            made = 0;
        } else if (bad != NO_MEMORY) {
            result = PyLong_FromSsize_t(bad);
        }
    }
    for (Py_ssize_t k = 0; k < made; k++)
        result_free(s.results[k]);
    scratch_free(&s);
    return result;
}

PyDoc_STRVAR(allocates_doc,
"allocates(kind) -> bool\n\n"
"Whether fresh() can return tensors of the type `kind` (its DLPack C exchange API makes them).");

static PyObject *
fastcall_allocates(PyObject *module, PyObject *kind)
{
    (void)module;
    if (!PyType_Check(kind)) {
        PyErr_SetString(PyExc_TypeError, "allocates(kind: type)");
        return NULL;
    }
    return PyBool_FromLong(allocating_api((PyTypeObject *)kind) != NULL);
}

PyDoc_STRVAR(live_results_doc,
"live_results() -> int\n\n"
"How many result blocks fresh() has allocated that are not yet freed (by their tensor's deleter).");

static PyObject *
fastcall_live_results(PyObject *module, PyObject *unused)
{
    (void)module, (void)unused;
    return PyLong_FromLongLong(__atomic_load_n(&live_result_blocks, __ATOMIC_RELAXED));
}

static PyMethodDef methods[] = {
    {"call", (PyCFunction)(void (*)(void))fastcall_call, METH_FASTCALL, call_doc},
    {"fresh", (PyCFunction)(void (*)(void))fastcall_fresh, METH_FASTCALL, fresh_doc},
    {"allocates", fastcall_allocates, METH_O, allocates_doc},
    {"live_results", fastcall_live_results, METH_NOARGS, live_results_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "compiler._fastcall",
    .m_doc = PyDoc_STR("Checked calls of packed Kina entry points (see compiler/runtime.py)."),
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__fastcall(void)
{
    if (PyType_Ready(&EntryType) < 0 || dlpack_init() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&EntryType);
    if (PyModule_AddObject(m, "Entry", (PyObject *)&EntryType) < 0) {
        Py_DECREF(&EntryType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "RELEASE_GIL_BYTES", RELEASE_GIL_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
