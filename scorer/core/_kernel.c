/* The scoring kernel of scorer.core.metrics.score, compiled.
 *
 * Same conventions, same arithmetic, same order of operations as the Python
 * kernel (scorer/core/metrics.py, whose docstring pins them): every DCG term is
 * gain / log2(rank + 1) summed in rank order, with the gains and logarithms the
 * Python module computed (handed over once by configure()), so the numbers are
 * the same to the last bit. tests/unit/test_kernel.py checks that on random
 * rankings against the Python kernel.
 *
 * It takes what the worker gives it: a list of ids and the judgments' two
 * dicts of int grades up to MAX_GRADE. Anything else (another sequence type,
 * a dict subclass, a grade that is not an int or is above MAX_GRADE) returns
 * NotImplemented and the Python kernel scores it, raising its own errors.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

#define NDCG_CUTOFF 10
#define N_MEASURES 7
#define N_TABLE_GAINS 32

static double log2_rank[NDCG_CUTOFF];
static double table_gains[N_TABLE_GAINS];
static long max_grade = -1; /* -1: not configured */
static PyTypeObject *values_type = NULL;

/* The gain of a relevant grade (1 <= grade <= max_grade): 2**grade - 1 as the
 * Python float of that int, which for grade > 53 rounds to 2**grade, as the
 * double subtraction below does. */
static inline double
gain_of(long grade)
{
    return grade < N_TABLE_GAINS ? table_gains[grade] : ldexp(1.0, (int)grade) - 1.0;
}

/* -1: not a grade the kernel takes (the caller returns NotImplemented). */
static inline long
grade_of(PyObject *value)
{
    if (!PyLong_CheckExact(value)) {
        return -1;
    }
    int overflow = 0;
    long grade = PyLong_AsLongAndOverflow(value, &overflow);
    if (overflow || grade < 1 || grade > max_grade) {
        return -1;
    }
    return grade;
}

static int
descending(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

/* Grades found, kept in a small buffer first. */
typedef struct {
    long small[64];
    long *grades;
    Py_ssize_t n, capacity;
} Found;

static int
found_add(Found *found, long grade)
{
    if (found->n == found->capacity) {
        Py_ssize_t capacity = found->capacity * 2;
        long *grown;
        if (found->grades == found->small) {
            grown = PyMem_Malloc(capacity * sizeof(long));
            if (grown != NULL) {
                memcpy(grown, found->small, found->n * sizeof(long));
            }
        }
        else {
            grown = PyMem_Realloc(found->grades, capacity * sizeof(long));
        }
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        found->grades = grown;
        found->capacity = capacity;
    }
    found->grades[found->n++] = grade;
    return 0;
}

/* Adds doc to the credited set (made on first use). 1: added, 0: was there. */
static int
credit(PyObject **credited, PyObject *doc)
{
    if (*credited == NULL) {
        *credited = PySet_New(NULL);
        if (*credited == NULL) {
            return -1;
        }
    }
    else {
        int there = PySet_Contains(*credited, doc);
        if (there != 0) {
            return there < 0 ? -1 : 0;
        }
    }
    return PySet_Add(*credited, doc) < 0 ? -1 : 1;
}

static PyObject *
kernel_configure(PyObject *module, PyObject *args)
{
    PyObject *logs, *gains, *type;
    long largest;
    if (!PyArg_ParseTuple(args, "O!O!lO!", &PyTuple_Type, &logs, &PyTuple_Type, &gains,
                          &largest, &PyType_Type, &type)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(logs) != NDCG_CUTOFF || PyTuple_GET_SIZE(gains) != N_TABLE_GAINS) {
        PyErr_SetString(PyExc_ValueError, "configure: 10 logarithms and 32 gains expected");
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type) || largest < 1 ||
        largest > 1020) {
        PyErr_SetString(PyExc_ValueError, "configure: a tuple type and a grade bound expected");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < NDCG_CUTOFF; i++) {
        log2_rank[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(logs, i));
    }
    for (Py_ssize_t i = 0; i < N_TABLE_GAINS; i++) {
        table_gains[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(gains, i));
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(values_type, (PyTypeObject *)type);
    max_grade = largest;
    Py_RETURN_NONE;
}

static PyObject *
kernel_score(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "score(ranked, grades, others, n_relevant, ideal_dcg, k)");
        return NULL;
    }
    PyObject *ranked = args[0], *grades = args[1], *others = args[2];
    if (max_grade < 0 || !PyList_CheckExact(ranked) || !PyDict_CheckExact(grades) ||
        !PyDict_CheckExact(others) || !PyLong_CheckExact(args[3]) ||
        !PyFloat_CheckExact(args[4]) || !PyLong_CheckExact(args[5])) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    int overflow = 0;
    long n_relevant = PyLong_AsLongAndOverflow(args[3], &overflow);
    if (overflow || n_relevant < 0) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    long k = PyLong_AsLongAndOverflow(args[5], &overflow);
    if (overflow || k < 1 || k > (1L << 40)) {
        Py_RETURN_NOTIMPLEMENTED; /* k < 1: the Python kernel raises its ValueError */
    }
    double ideal = PyFloat_AS_DOUBLE(args[4]);

    PyObject *credited = NULL, *result = NULL;
    Found found = {.grades = NULL, .n = 0, .capacity = 64};
    found.grades = found.small;
    long hits = 0, judged_slots = 0, first_relevant_rank = 0;
    double dcg = 0.0;
    Py_ssize_t length = PyList_GET_SIZE(ranked);
    Py_ssize_t top = k > NDCG_CUTOFF ? k : NDCG_CUTOFF;
    Py_ssize_t head = length < top ? length : top;
    int declined = 0;

    for (Py_ssize_t index = 0; index < head; index++) {
        if (PyList_GET_SIZE(ranked) != length) {
            declined = 1; /* changed under us by an __eq__: let Python decide */
            goto done;
        }
        PyObject *doc = PyList_GET_ITEM(ranked, index);
        Py_INCREF(doc); /* the lookups may run __eq__ of str subclasses */
        PyObject *value = PyDict_GetItemWithError(grades, doc);
        if (value == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(doc);
                goto done;
            }
            if (index < k) {
                int judged = PyDict_Contains(others, doc);
                if (judged < 0) {
                    Py_DECREF(doc);
                    goto done;
                }
                judged_slots += judged;
            }
            Py_DECREF(doc);
            continue;
        }
        long grade = grade_of(value);
        if (grade < 0) {
            Py_DECREF(doc);
            declined = 1;
            goto done;
        }
        if (index < k) {
            judged_slots++;
        }
        int added = credit(&credited, doc);
        Py_DECREF(doc);
        if (added <= 0) {
            if (added < 0) {
                goto done;
            }
            continue;
        }
        if (found_add(&found, grade) < 0) {
            goto done;
        }
        if (!first_relevant_rank) {
            first_relevant_rank = index + 1;
        }
        if (index < k) {
            hits++;
        }
        if (index < NDCG_CUTOFF) {
            dcg += gain_of(grade) / log2_rank[index];
        }
    }
    if (found.n < n_relevant && length > top) {
        /* MRR has no cutoff and the candidates are every returned id: the
         * relevant ids below the top, in one pass over the tail. */
        for (Py_ssize_t index = top; index < length && PyList_GET_SIZE(ranked) == length;
             index++) {
            PyObject *doc = PyList_GET_ITEM(ranked, index);
            Py_INCREF(doc);
            PyObject *value = PyDict_GetItemWithError(grades, doc);
            if (value == NULL) {
                Py_DECREF(doc);
                if (PyErr_Occurred()) {
                    goto done;
                }
                continue;
            }
            long grade = grade_of(value);
            if (grade < 0) {
                Py_DECREF(doc);
                declined = 1;
                goto done;
            }
            if (!first_relevant_rank) {
                first_relevant_rank = index + 1;
            }
            int added = credit(&credited, doc);
            Py_DECREF(doc);
            if (added < 0 || (added && found_add(&found, grade) < 0)) {
                goto done;
            }
            if (found.n >= n_relevant) {
                break;
            }
        }
        if (PyList_GET_SIZE(ranked) != length) {
            declined = 1; /* changed under us by an __eq__: let Python decide */
            goto done;
        }
    }

    double candidate = 0.0;
    if (ideal > 0 && found.n) {
        if (found.n == n_relevant) {
            candidate = 1.0; /* every relevant id returned: their best order is the ideal */
        }
        else {
            qsort(found.grades, found.n, sizeof(long), descending);
            double best = 0.0;
            for (Py_ssize_t i = 0; i < found.n && i < NDCG_CUTOFF; i++) {
                best += gain_of(found.grades[i]) / log2_rank[i];
            }
            candidate = best / ideal;
        }
    }
    Py_ssize_t filled = length > k ? k : length;
    /* In the slots of scorer.core.measures.MEASURES (checked at import). */
    double slots[N_MEASURES] = {
        n_relevant ? (double)hits / (double)n_relevant : 0.0,
        (double)hits / (double)k,
        ideal > 0 ? dcg / ideal : 0.0,
        first_relevant_rank ? 1.0 / (double)first_relevant_rank : 0.0,
        0.0, /* hit@k: an int */
        filled ? (double)judged_slots / (double)filled : 0.0,
        candidate,
    };
    result = values_type->tp_alloc(values_type, N_MEASURES);
    if (result == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < N_MEASURES; i++) {
        PyObject *item = i == 4 ? PyLong_FromLong(hits ? 1 : 0) : PyFloat_FromDouble(slots[i]);
        if (item == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, i, item);
    }

done:
    Py_XDECREF(credited);
    if (found.grades != found.small) {
        PyMem_Free(found.grades);
    }
    if (declined) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    return result;
}

static PyMethodDef kernel_methods[] = {
    {"configure", kernel_configure, METH_VARARGS,
     "configure(log2_ranks, gains, max_grade, values_type): the Python kernel's tables."},
    {"score", (PyCFunction)(void (*)(void))kernel_score, METH_FASTCALL,
     "score(ranked, grades, others, n_relevant, ideal_dcg, k) -> values or NotImplemented."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "scorer.core._kernel",
    "The compiled scoring kernel (see scorer.core.metrics.score).", -1, kernel_methods,
};

PyMODINIT_FUNC
PyInit__kernel(void)
{
    PyObject *module = PyModule_Create(&kernel_module);
    if (module == NULL) {
        return NULL;
    }
    /* The MetricValues fields it returns, in slot order: scorer.core.metrics uses it
     * only while the registry (scorer.core.measures) lists exactly these. */
    PyObject *fields = Py_BuildValue("(sssssss)", "recall_at_k", "precision_at_k",
                                     "ndcg_at_10", "mrr", "hit_at_k", "judged_at_k",
                                     "candidate_ndcg_at_10");
    if (fields == NULL || PyModule_AddObject(module, "FIELDS", fields) < 0) {
        Py_XDECREF(fields);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
