/* The hot loop in C: time each next() of an iterator into a ring of clock pairs
 * (Timer), and run a whole plain epoch over it (Epoch).
 *
 * See NOTE [ Compiled hot loop ] in collector/record/hotloop.py, which holds the
 * pure-Python twins of these types (used where no compiler was available) and
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
    int64_t end_t0;        /* t_request_ns of the next() that ended the iterator; < 0: not yet */
} Timer;

static inline int64_t
clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* the clocks behind time.perf_counter_ns() and time.thread_time_ns() on Linux */
#define monotonic_ns() clock_ns(CLOCK_MONOTONIC)
#define thread_cpu_ns() clock_ns(CLOCK_THREAD_CPUTIME_ID)

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
    self->end_t0 = -1;
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
        /* StopIteration (or none set: exhausted) and errors pass through unchanged */
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_StopIteration)) {
            self->end_t0 = t0;  /* the final next(): its time is the epoch's end wait */
        }
        return NULL;
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

static PyObject *
Timer_get_end_request_ns(Timer *self, void *Py_UNUSED(closure))
{
    if (self->end_t0 < 0) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong(self->end_t0);
}

static PyMethodDef Timer_methods[] = {
    {"drain", (PyCFunction)Timer_drain, METH_NOARGS,
     "(first_index, bytes): every (t_request_ns, t_return_ns) int64 pair written since the last drain."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Timer_getset[] = {
    {"count", (getter)Timer_get_count, NULL, "batches handed out so far", NULL},
    {"last", (getter)Timer_get_last, NULL, "(t_request_ns, t_return_ns, previous t_return_ns or None) of the last batch", NULL},
    {"end_request_ns", (getter)Timer_get_end_request_ns, NULL,
     "t_request_ns of the next() that ended the iterator (StopIteration), or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TimerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "collector.record._hotloop.Timer",
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

/* -- Epoch: one plain epoch, timed in C, described every stride-th batch -- */

typedef struct {
    PyObject_HEAD
    Timer *timer;
    PyObject *on_batch;    /* on_batch(index, t0, t1, prev_t1 or None, cpu_ns or clock's reading, batch) -> next stride */
    PyObject *on_end;      /* on_end(count): once, at exhaustion or when dropped */
    PyObject *on_error;    /* on_error(exception): each exception next() raises into the loop */
    PyObject *clock;       /* NULL, or clock(): read before a described next(), handed to on_batch as cpu */
    Py_ssize_t countdown;  /* batches to hand out before the next described one */
    int ended;
} Epoch;

static PyObject *
Epoch_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timer", "on_batch", "on_end", "on_error", "clock", NULL};
    PyObject *timer, *on_batch, *on_end, *on_error, *clock = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOO|O", kwlist, &TimerType, &timer, &on_batch, &on_end,
                                     &on_error, &clock)) {
        return NULL;
    }
    if (!PyCallable_Check(on_batch) || !PyCallable_Check(on_end) || !PyCallable_Check(on_error)
        || (clock != Py_None && !PyCallable_Check(clock))) {
        PyErr_SetString(PyExc_TypeError, "on_batch, on_end, on_error (and clock, if given) must be callable");
        return NULL;
    }
    Epoch *self = (Epoch *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->timer = (Timer *)Py_NewRef(timer);
    self->on_batch = Py_NewRef(on_batch);
    self->on_end = Py_NewRef(on_end);
    self->on_error = Py_NewRef(on_error);
    self->clock = clock == Py_None ? NULL : Py_NewRef(clock);
    return (PyObject *)self;
}

static int
Epoch_traverse(Epoch *self, visitproc visit, void *arg)
{
    Py_VISIT(self->timer);
    Py_VISIT(self->on_batch);
    Py_VISIT(self->on_end);
    Py_VISIT(self->on_error);
    Py_VISIT(self->clock);
    return 0;
}

static int
Epoch_clear(Epoch *self)
{
    Py_CLEAR(self->timer);
    Py_CLEAR(self->on_batch);
    Py_CLEAR(self->on_end);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->clock);
    return 0;
}

/* Call on_end(count) once. */
static void
Epoch_end(Epoch *self)
{
    if (self->ended || self->timer == NULL) {
        return;
    }
    self->ended = 1;
    PyObject *result = PyObject_CallFunction(self->on_end, "L", (long long)self->timer->head);
    if (result == NULL) {
        PyErr_WriteUnraisable(self->on_end);
    }
    Py_XDECREF(result);
}

/* next() returned NULL. At the end (StopIteration, or no error set) the epoch
 * ends. Any other exception goes to the loop unchanged, after on_error(exc)
 * has seen it; the epoch goes on, as the loader's own iterator does when the
 * loop catches it and asks again. */
static PyObject *
Epoch_failed(Epoch *self)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL || PyErr_GivenExceptionMatches(type, PyExc_StopIteration)) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        Epoch_end(self);
        return NULL;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL) {
        PyException_SetTraceback(value, tb);
    }
    if (self->on_error != NULL) {
        PyObject *result = PyObject_CallOneArg(self->on_error, value);
        if (result == NULL) {
            PyErr_Clear();  /* the collector's fault: never the loop's */
        }
        Py_XDECREF(result);
    }
    PyErr_Restore(type, value, tb);
    return NULL;
}

static PyObject *
Epoch_next(Epoch *self)
{
    if (self->ended) {
        return NULL;
    }
    Timer *timer = self->timer;
    if (self->countdown > 0) {
        PyObject *item = Timer_next(timer);
        if (item == NULL) {
            return Epoch_failed(self);
        }
        self->countdown -= 1;
        return item;
    }
    PyObject *before = NULL;  /* clock(): the caller's own reading, handed back as cpu */
    if (self->clock != NULL) {
        before = PyObject_CallNoArgs(self->clock);
        if (before == NULL) {
            PyErr_Clear();  /* the collector's fault: no reading, the batch goes on */
            before = Py_NewRef(Py_None);
        }
    }
    int64_t c0 = before == NULL ? thread_cpu_ns() : 0;
    PyObject *item = Timer_next(timer);
    if (item == NULL) {
        Py_XDECREF(before);
        return Epoch_failed(self);
    }
    PyObject *cpu = before != NULL ? before : PyLong_FromLongLong(thread_cpu_ns() - c0);
    PyObject *prev = timer->prev_t1 < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(timer->prev_t1);
    PyObject *stride = prev == NULL || cpu == NULL ? NULL : PyObject_CallFunction(
        self->on_batch, "LLLOOO", (long long)(timer->head - 1), (long long)timer->last_t0,
        (long long)timer->last_t1, prev, cpu, item);
    Py_XDECREF(prev);
    Py_XDECREF(cpu);
    if (stride == NULL && !PyErr_ExceptionMatches(PyExc_Exception)) {
        /* KeyboardInterrupt, SystemExit: the user's, so they go to the loop; the epoch goes on */
        Py_DECREF(item);
        return NULL;
    }
    Py_ssize_t k = stride == NULL ? -1 : PyLong_AsSsize_t(stride);
    Py_XDECREF(stride);
    if (k == -1 && PyErr_Occurred()) {
        /* a fault in the collector's own callback: collector.record.hotloop.describing_failed */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                             "stallwatch: describing a batch failed (%s: %S); no more batch sizes this epoch",
                             Py_TYPE(value)->tp_name, value) < 0) {
            PyErr_Clear();  /* warnings turned into errors must not reach the loop either */
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        self->countdown = PY_SSIZE_T_MAX;
    } else {
        self->countdown = k > 1 ? k - 1 : 0;
    }
    return item;
}

static void
Epoch_finalize(Epoch *self)
{
    /* dropped before its end (the loop broke out early): not an error */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    Epoch_end(self);
    PyErr_Restore(type, value, tb);
}

static void
Epoch_dealloc(Epoch *self)
{
    if (PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0) {
        return;  /* resurrected */
    }
    PyObject_GC_UnTrack(self);
    Epoch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject EpochType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "collector.record._hotloop.Epoch",
    .tp_doc = "Epoch(timer, on_batch, on_end, on_error, clock=None): iterates like the timer, describing every stride-th batch.",
    .tp_basicsize = sizeof(Epoch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Epoch_new,
    .tp_dealloc = (destructor)Epoch_dealloc,
    .tp_finalize = (destructor)Epoch_finalize,
    .tp_traverse = (traverseproc)Epoch_traverse,
    .tp_clear = (inquiry)Epoch_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Epoch_next,
};

static struct PyModuleDef hotloop_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "collector.record._hotloop",
    .m_doc = "The compiled twins of collector.record.hotloop.PyTimer and py_epoch.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__hotloop(void)
{
    if (PyType_Ready(&TimerType) < 0 || PyType_Ready(&EpochType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&hotloop_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "Timer", (PyObject *)&TimerType) < 0
        || PyModule_AddObjectRef(module, "Epoch", (PyObject *)&EpochType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
