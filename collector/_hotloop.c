/* The hot loop in C: time each next() of an iterator into a ring of clock pairs.
 *
 * See NOTE [ Compiled hot loop ] in collector/hotloop.py, which holds the
 * pure-Python twin of this type (used where no compiler was available) and
 * the contract both keep. Every method runs with the GIL held; the wrapped
 * iterator may release it inside next(), and the ring is only written after
 * that call returns, so a drain from another thread never sees half an entry.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    PyObject *it;          /* the iterator being timed */
    int64_t *ring;         /* capacity entries of (t_request_ns, t_return_ns) */
    Py_ssize_t capacity;
    int64_t head;          /* entries ever written: batches handed out */
    int64_t read;          /* entries handed to drain() or lapped */
    int64_t last_t0, last_t1, prev_t1;  /* prev_t1 < 0: no batch before the last */
} Timer;

static inline int64_t
monotonic_ns(void)
{
    /* the clock behind time.perf_counter_ns() on Linux */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static PyObject *
Timer_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"iterator", "capacity", NULL};
    PyObject *iterable;
    Py_ssize_t capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On", kwlist, &iterable, &capacity)) {
        return NULL;
    }
    if (capacity < 1) {
        PyErr_SetString(PyExc_ValueError, "capacity must be >= 1");
        return NULL;
    }
    Timer *self = (Timer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->it = PyObject_GetIter(iterable);
    if (self->it == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->ring = PyMem_Calloc((size_t)capacity * 2, sizeof(int64_t));
    if (self->ring == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->capacity = capacity;
    self->prev_t1 = -1;
    self->last_t1 = -1;
    return (PyObject *)self;
}

static int
Timer_traverse(Timer *self, visitproc visit, void *arg)
{
    Py_VISIT(self->it);
    return 0;
}

static int
Timer_clear(Timer *self)
{
    Py_CLEAR(self->it);
    return 0;
}

static void
Timer_dealloc(Timer *self)
{
    PyObject_GC_UnTrack(self);
    Timer_clear(self);
    PyMem_Free(self->ring);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Timer_next(Timer *self)
{
    if (self->it == NULL) {
        return NULL;
    }
    int64_t t0 = monotonic_ns();
    PyObject *item = Py_TYPE(self->it)->tp_iternext(self->it);
    if (item == NULL) {
        return NULL;  /* StopIteration (or none set: exhausted) and errors pass through unchanged */
    }
    int64_t t1 = monotonic_ns();
    int64_t *slot = self->ring + 2 * (self->head % self->capacity);
    slot[0] = t0;
    slot[1] = t1;
    self->head += 1;
    self->prev_t1 = self->last_t1;
    self->last_t0 = t0;
    self->last_t1 = t1;
    return item;
}

static PyObject *
Timer_drain(Timer *self, PyObject *Py_UNUSED(ignored))
{
    /* (index of the first entry, int64 pairs as bytes) for every entry since the last drain */
    int64_t start = self->read;
    if (self->head - start > self->capacity) {
        start = self->head - self->capacity;  /* lapped: the oldest are gone */
    }
    Py_ssize_t n = (Py_ssize_t)(self->head - start);
    PyObject *data = PyBytes_FromStringAndSize(NULL, n * 2 * (Py_ssize_t)sizeof(int64_t));
    if (data == NULL) {
        return NULL;
    }
    char *out = PyBytes_AS_STRING(data);
    Py_ssize_t lo = (Py_ssize_t)(start % self->capacity);
    Py_ssize_t first_part = n < self->capacity - lo ? n : self->capacity - lo;
    memcpy(out, self->ring + 2 * lo, (size_t)first_part * 2 * sizeof(int64_t));
    memcpy(out + first_part * 2 * sizeof(int64_t), self->ring, (size_t)(n - first_part) * 2 * sizeof(int64_t));
    self->read = self->head;
    return Py_BuildValue("(LN)", (long long)start, data);
}

static PyObject *
Timer_get_count(Timer *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->head);
}

static PyObject *
Timer_get_last(Timer *self, void *Py_UNUSED(closure))
{
    if (self->head == 0) {
        Py_RETURN_NONE;
    }
    if (self->prev_t1 < 0) {
        return Py_BuildValue("(LLO)", (long long)self->last_t0, (long long)self->last_t1, Py_None);
    }
    return Py_BuildValue("(LLL)", (long long)self->last_t0, (long long)self->last_t1, (long long)self->prev_t1);
}

static PyMethodDef Timer_methods[] = {
    {"drain", (PyCFunction)Timer_drain, METH_NOARGS,
     "(first_index, bytes): every (t_request_ns, t_return_ns) int64 pair written since the last drain."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Timer_getset[] = {
    {"count", (getter)Timer_get_count, NULL, "batches handed out so far", NULL},
    {"last", (getter)Timer_get_last, NULL, "(t_request_ns, t_return_ns, previous t_return_ns or None) of the last batch", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TimerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "collector._hotloop.Timer",
    .tp_doc = "Timer(iterator, capacity): iterates like iterator, timing each next() into a ring.",
    .tp_basicsize = sizeof(Timer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Timer_new,
    .tp_dealloc = (destructor)Timer_dealloc,
    .tp_traverse = (traverseproc)Timer_traverse,
    .tp_clear = (inquiry)Timer_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Timer_next,
    .tp_methods = Timer_methods,
    .tp_getset = Timer_getset,
};

static struct PyModuleDef hotloop_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "collector._hotloop",
    .m_doc = "The compiled twin of collector.hotloop.PyTimer.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__hotloop(void)
{
    if (PyType_Ready(&TimerType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&hotloop_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&TimerType);
    if (PyModule_AddObject(module, "Timer", (PyObject *)&TimerType) < 0) {
        Py_DECREF(&TimerType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
