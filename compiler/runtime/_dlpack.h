/* _dlpack.h: the DLPack half of _fastcall.c (included by it; issue 28).
 *
 * An argument that is not an ndarray but whose type has `__dlpack__` (a torch.Tensor,
 * a JAX array, any NumPy-2-style producer) is read here, in C, without a copy:
 *
 * - a type that publishes the DLPack C exchange API (`type.__dlpack_c_exchange_api__`,
 *   a capsule "dlpack_exchange_api": DLPack 1.2+, PyTorch >= 2.10) fills a DLTensor on
 *   the stack through `dltensor_from_py_object_no_sync` (no allocation, no Python call:
 *   tens of ns).  The DLTensor borrows the object, which the caller's argument tuple keeps
 *   alive for the whole call;
 * - any other type is asked for its device, `__dlpack_device__()` (the CPU, or declined
 *   before anything is exported), then for a capsule, `__dlpack__(max_version=(1, 0))` (a producer
 *   without that keyword: `__dlpack__()`), "dltensor_versioned" or legacy "dltensor".  The
 *   capsule is consumed as the protocol says: renamed "used_dltensor[_versioned]" and its
 *   deleter called once the function has returned.
 *
 * Either way the DLTensor is checked like a buffer: device kDLCPU, the slot's dtype
 * (code, bits, one lane), rank, dims, strides NULL or row-major (dims of extent 1 may have
 * any stride, as in NumPy's C-contiguity), the data pointer plus byte_offset aligned to the
 * item size; an out= buffer must also be writable (a versioned capsule without the
 * READ_ONLY or IS_COPIED flag, or an exchange-API type that is a torch.Tensor: a legacy
 * capsule says nothing of writability, e.g. JAX's immutable arrays, so it is input only).
 * A type with `requires_grad` (torch) must have it false, and a type with `is_neg` must
 * say false: a torch tensor with the negative bit set (`z.conj().imag`, and its detach()ed
 * or inference-mode copies, which are no views: every tensor is asked) exports its raw,
 * un-negated memory through DLPack.  (Asking costs ~70 ns a tensor, torch's method
 * releasing the GIL; the `_base` of views only, ~40 ns, missed those copies.)
 * Whatever fails, the slot is declined (its index returned, nothing called) and the
 * Python path (compiler/runtime/dlpack.py) says what is wrong in a KinaArgumentError.
 *
 * The structs below are DLPack's ABI (dlpack.h, v1.x), declared here so that no header
 * of any array library is needed to build.
 */
#include <Python.h>
#include <stdint.h>

typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;           /* NULL: row-major (before DLPack 1.2) */
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;         /* (a major version other than 1 may move it: refused) */
} DLManagedTensorVersioned;
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct {
    DLPackExchangeAPIHeader header;
    int (*managed_tensor_allocator)(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                                    void (*set_error)(void *error_ctx, const char *kind, const char *message));
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, DLManagedTensorVersioned **out);
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *tensor, void **out_py_object);
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
    void *current_work_stream;
} DLPackExchangeAPI;

#define DL_CPU 1
#define DL_FLAG_READ_ONLY (1ULL << 0)
#define DL_FLAG_IS_COPIED (1ULL << 1)

/* How a slot's array was taken, so that release_held undoes exactly that. */
enum { HELD_NONE, HELD_BUFFER, HELD_BORROWED, HELD_LEGACY, HELD_VERSIONED };

typedef struct {
    int kind;
    Py_buffer view;             /* HELD_BUFFER */
    PyObject *capsule;          /* HELD_LEGACY / HELD_VERSIONED: renamed "used_..." */
    void *managed;              /* the DLManagedTensor[Versioned] whose deleter we owe */
} Held;

static void
release_held(Held *h)
{
    switch (h->kind) {
    case HELD_BUFFER:
        PyBuffer_Release(&h->view);
        break;
    case HELD_LEGACY: {
        DLManagedTensor *m = h->managed;
        if (m->deleter)
            m->deleter(m);
        Py_DECREF(h->capsule);
        break;
    }
    case HELD_VERSIONED: {
        DLManagedTensorVersioned *m = h->managed;
        if (m->deleter)
            m->deleter(m);
        Py_DECREF(h->capsule);
        break;
    }
    default:
        break;
    }
    h->kind = HELD_NONE;
}

/* ---- what each foreign type offers, looked up once per type --------------------------- */
/* An attribute read: its C getter when the type defines it as a getset descriptor (torch's
 * `requires_grad`: calling it directly skips the generic lookup, a third of the cost), else
 * NULL and the attribute is read by name. */
typedef struct {
    getter get;
    void *closure;
    PyCFunction meth;           /* find_method */
    PyObject *name;
} Attr;

static void
find_attr(PyTypeObject *type, PyObject *name, Attr *attr)
{
    /* borrowed; what is kept, the getter and its closure, live in the defining module's static
     * PyGetSetDef, so they stay valid even if the attribute is later replaced */
    PyObject *descr = _PyType_Lookup(type, name);
    attr->name = name;
    attr->get = NULL;
    if (descr != NULL && Py_IS_TYPE(descr, &PyGetSetDescr_Type)) {
        PyGetSetDef *def = ((PyGetSetDescrObject *)descr)->d_getset;
        attr->get = def->get;
        attr->closure = def->closure;
    }
}

/* An attribute read that is a method call without arguments (torch's `is_neg()`): the
 * method's C function when the type defines it as a METH_NOARGS method descriptor (the
 * same saving), else NULL and it is called by name. */
static void
find_method(PyTypeObject *type, PyObject *name, Attr *attr)
{
    PyObject *descr = _PyType_Lookup(type, name);    /* borrowed; its PyMethodDef is static */
    attr->name = name;
    attr->get = NULL;
    attr->meth = NULL;
    if (descr != NULL && Py_IS_TYPE(descr, &PyMethodDescr_Type)) {
        PyMethodDef *def = ((PyMethodDescrObject *)descr)->d_method;
        if ((def->ml_flags & ~METH_COEXIST) == METH_NOARGS)
            attr->meth = def->ml_meth;
    }
}

static PyObject *
call_method(PyObject *obj, const Attr *attr)
{
    return attr->meth != NULL ? attr->meth(obj, NULL) : PyObject_CallMethodNoArgs(obj, attr->name);
}

static PyObject *
read_attr(PyObject *obj, const Attr *attr)
{
    return attr->get != NULL ? attr->get(obj, attr->closure) : PyObject_GetAttr(obj, attr->name);
}

typedef struct {
    PyTypeObject *type;         /* a strong reference: the entry outlives no type */
    const DLPackExchangeAPI *api;  /* NULL: the capsule protocol */
    int writable;               /* exchange-API tensors of this type are writable (torch) */
    int has_grad, has_neg;      /* check requires_grad / is_neg() per object */
    Attr requires_grad, is_neg;
    int has_dlpack;
} TypeInfo;

#define TYPE_CACHE 8
static TypeInfo type_cache[TYPE_CACHE];
static int type_cache_used;
static PyObject *str_dlpack, *str_dlpack_device, *str_requires_grad, *str_is_neg, *kw_max_version, *max_version_1_0;

static int
dlpack_init(void)
{
    str_dlpack = PyUnicode_InternFromString("__dlpack__");
    str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    str_requires_grad = PyUnicode_InternFromString("requires_grad");
    str_is_neg = PyUnicode_InternFromString("is_neg");
    kw_max_version = Py_BuildValue("(s)", "max_version");
    max_version_1_0 = Py_BuildValue("(ii)", 1, 0);
    return str_dlpack && str_dlpack_device && str_requires_grad && str_is_neg && kw_max_version && max_version_1_0 ? 0 : -1;
}

static int
type_has(PyTypeObject *type, const char *name)
{
    int has = PyObject_HasAttrString((PyObject *)type, name);
    PyErr_Clear();
    return has;
}

static const DLPackExchangeAPI *
exchange_api(PyTypeObject *type)
{
    PyObject *cap = PyObject_GetAttrString((PyObject *)type, "__dlpack_c_exchange_api__");
    const DLPackExchangeAPI *api = NULL;
    if (cap != NULL && PyCapsule_IsValid(cap, "dlpack_exchange_api"))
        api = PyCapsule_GetPointer(cap, "dlpack_exchange_api");
    Py_XDECREF(cap);
    PyErr_Clear();
    /* the table is static in the producer (the protocol requires it to live as long as the
     * process), so the capsule need not be kept */
    if (api == NULL || api->header.version.major != 1 || api->dltensor_from_py_object_no_sync == NULL)
        return NULL;
    return api;
}

static void
describe_type(PyTypeObject *type, TypeInfo *info)
{
    info->type = type;
    info->has_dlpack = type_has(type, "__dlpack__");
    info->api = info->has_dlpack ? exchange_api(type) : NULL;
    info->has_grad = type_has(type, "requires_grad");
    info->has_neg = type_has(type, "is_neg");
    find_attr(type, str_requires_grad, &info->requires_grad);
    find_method(type, str_is_neg, &info->is_neg);
    /* a torch.Tensor (or subclass): its memory is writable unless it requires grad, which
     * is refused anyway; other exchange-API types are inputs only (no flags to say) */
    PyObject *module = PyObject_GetAttrString((PyObject *)type, "__module__");
    info->writable = module != NULL && PyUnicode_Check(module)
                     && PyUnicode_CompareWithASCIIString(module, "torch") == 0 && info->has_grad;
    Py_XDECREF(module);
    PyErr_Clear();
}

/* The type's entry (cached for the first TYPE_CACHE types seen; later ones are described
 * at each call into `scratch`). */
static const TypeInfo *
type_info(PyTypeObject *type, TypeInfo *scratch)
{
    for (int i = 0; i < type_cache_used; i++)
        if (type_cache[i].type == type)
            return &type_cache[i];
    describe_type(type, scratch);
    if (type_cache_used < TYPE_CACHE) {
        Py_INCREF(type);
        type_cache[type_cache_used] = *scratch;
        return &type_cache[type_cache_used++];
    }
    return scratch;
}

/* Whether `value` (a new reference, or NULL: an error) is false; anything else (true, an
 * error) declines. */
static int
is_false(PyObject *value)
{
    if (value == NULL) {
        PyErr_Clear();
        return 0;
    }
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    if (truth < 0)
        PyErr_Clear();
    return truth == 0;
}

/* obj.__dlpack__(max_version=(1, 0)), or obj.__dlpack__() for a producer older than
 * that keyword (a TypeError); NULL (no error set) when it fails. */
static PyObject *
call_dlpack(PyObject *obj)
{
    PyObject *args[2] = {obj, max_version_1_0};
    PyObject *cap = PyObject_VectorcallMethod(str_dlpack, args, 1, kw_max_version);
    if (cap == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        cap = PyObject_VectorcallMethod(str_dlpack, args, 1, NULL);
    }
    if (cap == NULL)
        PyErr_Clear();
    return cap;
}

/* Whether obj.__dlpack_device__() is (kDLCPU, n): asked before __dlpack__, so that a
 * tensor on another device is not exported at all (nor its stream synchronized). */
static int
on_cpu(PyObject *obj)
{
    PyObject *device = PyObject_CallMethodNoArgs(obj, str_dlpack_device);
    int cpu = device != NULL && PyTuple_Check(device) && PyTuple_GET_SIZE(device) == 2
              && PyLong_Check(PyTuple_GET_ITEM(device, 0)) && PyLong_AsLong(PyTuple_GET_ITEM(device, 0)) == DL_CPU;
    Py_XDECREF(device);
    PyErr_Clear();
    return cpu;
}

/* Consume a capsule from obj.__dlpack__() into h; 0 with *t its DLTensor, or -1 (declined;
 * whatever was taken is in h for release_held). */
static int
take_capsule(PyObject *obj, Held *h, int writable, const DLTensor **t)
{
    PyObject *cap = on_cpu(obj) ? call_dlpack(obj) : NULL;
    if (cap == NULL)
        return -1;
    int versioned = PyCapsule_IsValid(cap, "dltensor_versioned");
    if (!versioned && !PyCapsule_IsValid(cap, "dltensor")) {
        Py_DECREF(cap);         /* not a capsule, a used or misnamed one: not ours to consume */
        return -1;
    }
    void *managed = PyCapsule_GetPointer(cap, versioned ? "dltensor_versioned" : "dltensor");
    if (managed == NULL || PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor") < 0) {
        PyErr_Clear();
        Py_DECREF(cap);
        return -1;
    }
    /* consumed: from here the deleter is ours to call (release_held) */
    h->kind = versioned ? HELD_VERSIONED : HELD_LEGACY;
    h->capsule = cap;
    h->managed = managed;
    if (versioned) {
        const DLManagedTensorVersioned *m = managed;
        if (m->version.major != 1)
            return -1;
        if (writable && (m->flags & (DL_FLAG_READ_ONLY | DL_FLAG_IS_COPIED)))
            return -1;
        *t = &m->dl_tensor;
    } else {
        if (writable)
            return -1;          /* a legacy capsule does not say whether its memory may be written */
        *t = &((const DLManagedTensor *)managed)->dl_tensor;
    }
    return 0;
}

/* Whether a DLTensor is the slot's tensor: on the CPU, of its dtype, rank and dims, laid
 * out row-major (strides NULL, or compact ignoring dims of extent 1 as NumPy does; an
 * empty tensor has no layout), its first element aligned to the item size.  *nbytes: its
 * size in bytes. */
static int
dltensor_matches(const DLTensor *t, int ndim, const Py_ssize_t *dims, int code, int bits,
                 Py_ssize_t itemsize, Py_ssize_t *nbytes)
{
    if (t->device.device_type != DL_CPU || t->dtype.code != code || t->dtype.bits != bits
        || t->dtype.lanes != 1 || t->ndim != ndim || (ndim > 0 && t->shape == NULL))
        return 0;
    Py_ssize_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (t->shape[d] != dims[d])
            return 0;
        n *= dims[d];
    }
    if (t->strides != NULL && n > 0) {
        int64_t expected = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            if (t->shape[d] != 1 && t->strides[d] != expected)
                return 0;
            expected *= t->shape[d];
        }
    }
    uintptr_t data = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    if ((data & (uintptr_t)(itemsize - 1)) != 0 || (data == 0 && n > 0))
        return 0;
    *nbytes = n * itemsize;
    return 1;
}

/* Take a foreign array for the slot (see the top of this file): 1 with *data its first
 * element, or 0: declined.  `scratch` holds a borrowed DLTensor; h what must be released. */
static int
take_foreign(PyObject *obj, int ndim, const Py_ssize_t *dims, int code, int bits, Py_ssize_t itemsize,
             int writable, Held *h, DLTensor *scratch, void **data, Py_ssize_t *nbytes)
{
    TypeInfo info_scratch;
    const TypeInfo *info = type_info(Py_TYPE(obj), &info_scratch);
    if (!info->has_dlpack)
        return 0;
    if ((info->has_grad && !is_false(read_attr(obj, &info->requires_grad)))
        || (info->has_neg && !is_false(call_method(obj, &info->is_neg))))
        return 0;
    const DLTensor *t;
    if (info->api != NULL) {
        if (writable && !info->writable)
            return 0;
        if (info->api->dltensor_from_py_object_no_sync(obj, scratch) != 0) {
            PyErr_Clear();
            return 0;
        }
        h->kind = HELD_BORROWED;   /* owned by obj, which the arguments tuple holds */
        t = scratch;
    } else if (take_capsule(obj, h, writable, &t) < 0) {
        return 0;
    }
    if (!dltensor_matches(t, ndim, dims, code, bits, itemsize, nbytes))
        return 0;
    *data = (char *)t->data + t->byte_offset;
    return 1;
}

