/* _results.h: fresh results as tensors of the caller's library (included by _fastcall.c
 * after _dlpack.h; issue 28).
 *
 * `lib.f(x, like="torch")` used to allocate NumPy arrays and wrap each in a torch.Tensor
 * through Python (np.empty + torch.from_numpy + their deallocation: ~1.1 us a result, the
 * bulk of such a call).  fresh() in _fastcall.c instead allocates each result here, in C:
 * one malloc block per result holding a DLManagedTensorVersioned, its shape and strides
 * (row-major) and, 64-byte aligned, the data.  After the call it hands each block to the
 * producer's DLPack C exchange API, `managed_tensor_to_py_object_no_sync`, which makes a
 * tensor over that memory and takes ownership of the block: torch calls `result_free` when
 * the tensor's storage dies (views of it, or exports, keep it alive), possibly in another
 * thread without the GIL, hence plain malloc/free and an atomic counter.  ~0.45 us a result,
 * creation and deallocation, most of it torch's own tensor and Python object.
 *
 * torch's `managed_tensor_allocator` (at::empty plus a DLPack export) would do the same at
 * twice the cost.  Each result is its own block, so a result the caller keeps keeps no
 * other result's memory alive, and no two calls share memory.
 */
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Data alignment of a fresh result (torch's CPU allocator aligns to 64 bytes too). */
#define RESULT_ALIGN 64

/* Result blocks allocated and not yet freed (live_results(): what the tests check). */
static int64_t live_result_blocks;

static void
result_free(DLManagedTensorVersioned *m)
{
    __atomic_fetch_sub(&live_result_blocks, 1, __ATOMIC_RELAXED);
    free(m);
}

/* A block for a row-major tensor of `ndim` dims, DLPack dtype (code, bits) and `nbytes`
 * bytes, with version, deleter, device, dtype, shape and strides set; *data its aligned
 * data.  NULL (MemoryError set) when malloc fails. */
static DLManagedTensorVersioned *
result_alloc(int ndim, const Py_ssize_t *dims, int code, int bits, Py_ssize_t nbytes, void **data)
{
    size_t head = sizeof(DLManagedTensorVersioned) + 2 * (size_t)ndim * sizeof(int64_t);
    char *raw = malloc(head + RESULT_ALIGN - 1 + (size_t)nbytes);
    if (raw == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    __atomic_fetch_add(&live_result_blocks, 1, __ATOMIC_RELAXED);
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)raw;
    int64_t *shape = (int64_t *)(raw + sizeof(DLManagedTensorVersioned));
    int64_t *strides = shape + ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        shape[d] = dims[d];
        strides[d] = stride;
        stride *= dims[d];
    }
    memset(m, 0, sizeof *m);
    m->version.major = 1;               /* the layout of this struct: DLPack 1.x */
    m->version.minor = 0;
    m->deleter = result_free;           /* flags 0: writable, not a copy */
    m->dl_tensor.data = *data = (void *)(((uintptr_t)(raw + head) + RESULT_ALIGN - 1)
                                         & ~(uintptr_t)(RESULT_ALIGN - 1));
    m->dl_tensor.device.device_type = DL_CPU;
    m->dl_tensor.ndim = ndim;
    m->dl_tensor.dtype.code = (uint8_t)code;
    m->dl_tensor.dtype.bits = (uint8_t)bits;
    m->dl_tensor.dtype.lanes = 1;
    m->dl_tensor.shape = shape;
    m->dl_tensor.strides = strides;     /* explicit: DLPack 1.2 deprecates NULL strides */
    return m;
}

/* The exchange API of a type whose tensors fresh() can make (it has
 * managed_tensor_to_py_object_no_sync), or NULL. */
static const DLPackExchangeAPI *
allocating_api(PyTypeObject *type)
{
    TypeInfo scratch;
    const TypeInfo *info = type_info(type, &scratch);
    if (info->api == NULL || info->api->managed_tensor_to_py_object_no_sync == NULL)
        return NULL;
    return info->api;
}

/* The tensor over block m (whose ownership passes to it); NULL with an error set.  Should the
 * producer fail, the block is not freed: whether it took ownership before failing is not
 * said, and a leak on an error that should not happen beats a double free. */
static PyObject *
result_tensor(const DLPackExchangeAPI *api, DLManagedTensorVersioned *m)
{
    void *obj = NULL;
    if (api->managed_tensor_to_py_object_no_sync(m, &obj) != 0 || obj == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the DLPack exchange API made no tensor of a result");
        return NULL;
    }
    return (PyObject *)obj;
}
