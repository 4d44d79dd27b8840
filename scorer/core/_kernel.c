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
static PyObject *newline_str = NULL;

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

/* The measures, in the slots of scorer.core.measures.MEASURES (checked at import). */
static PyObject *
values_of(Found *found, long n_relevant, double ideal, long hits, long k, double dcg,
          long first_relevant_rank, long judged_slots, Py_ssize_t filled)
{
    double candidate = 0.0;
    if (ideal > 0 && found->n) {
        if (found->n == n_relevant) {
            candidate = 1.0; /* every relevant id returned: their best order is the ideal */
        }
        else {
            qsort(found->grades, found->n, sizeof(long), descending);
            double best = 0.0;
            for (Py_ssize_t i = 0; i < found->n && i < NDCG_CUTOFF; i++) {
                best += gain_of(found->grades[i]) / log2_rank[i];
            }
            candidate = best / ideal;
        }
    }
    double slots[N_MEASURES] = {
        n_relevant ? (double)hits / (double)n_relevant : 0.0,
        (double)hits / (double)k,
        ideal > 0 ? dcg / ideal : 0.0,
        first_relevant_rank ? 1.0 / (double)first_relevant_rank : 0.0,
        0.0, /* hit@k: an int */
        filled ? (double)judged_slots / (double)filled : 0.0,
        candidate,
    };
    PyObject *result = values_type->tp_alloc(values_type, N_MEASURES);
    if (result == NULL) {
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030E0000
    /* Tuples cache their hash from 3.14 on; -1 is "not computed", as tuple's own
     * constructor of a subtype sets it. */
    ((PyTupleObject *)result)->ob_hash = -1;
#endif
    for (Py_ssize_t i = 0; i < N_MEASURES; i++) {
        PyObject *item = i == 4 ? PyLong_FromLong(hits ? 1 : 0) : PyFloat_FromDouble(slots[i]);
        if (item == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, item);
    }
    return result;
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
    for (Py_ssize_t i = 0; i < NDCG_CUTOFF + N_TABLE_GAINS; i++) {
        PyObject *item = i < NDCG_CUTOFF ? PyTuple_GET_ITEM(logs, i)
                                         : PyTuple_GET_ITEM(gains, i - NDCG_CUTOFF);
        if (!PyFloat_CheckExact(item)) {
            PyErr_SetString(PyExc_TypeError, "configure: floats expected");
            return NULL;
        }
        if (i < NDCG_CUTOFF) {
            log2_rank[i] = PyFloat_AS_DOUBLE(item);
        }
        else {
            table_gains[i - NDCG_CUTOFF] = PyFloat_AS_DOUBLE(item);
        }
    }
    Py_INCREF(type);
    Py_XSETREF(values_type, (PyTypeObject *)type);
    max_grade = largest;
    Py_RETURN_NONE;
}

/* One scoring, between its steps. */
typedef struct {
    PyObject *grades, *others, *credited;
    Found found;
    long n_relevant, k, hits, judged_slots, first_relevant_rank;
    double ideal, dcg;
} Scoring;

/* Steps return 0 (go on), 1 (stop: declined, the Python kernel decides) or -1 (error). */
#define GO_ON 0
#define DECLINED 1

/* The id at `index` (from 0) of the top max(k, 10). */
static int
head_step(Scoring *s, PyObject *doc, Py_ssize_t index)
{
    PyObject *value = PyDict_GetItemWithError(s->grades, doc);
    if (value == NULL) {
        if (PyErr_Occurred()) {
            return -1;
        }
        if (index < s->k) {
            int judged = PyDict_Contains(s->others, doc);
            if (judged < 0) {
                return -1;
            }
            s->judged_slots += judged;
        }
        return GO_ON;
    }
    long grade = grade_of(value);
    if (grade < 0) {
        return DECLINED;
    }
    if (index < s->k) {
        s->judged_slots++;
    }
    int added = credit(&s->credited, doc);
    if (added <= 0) {
        return added; /* credited before (a repeat earns nothing), or an error */
    }
    if (found_add(&s->found, grade) < 0) {
        return -1;
    }
    if (!s->first_relevant_rank) {
        s->first_relevant_rank = index + 1;
    }
    if (index < s->k) {
        s->hits++;
    }
    if (index < NDCG_CUTOFF) {
        s->dcg += gain_of(grade) / log2_rank[index];
    }
    return GO_ON;
}

/* An id below the top: MRR has no cutoff and the candidates are every returned id. */
static int
tail_step(Scoring *s, PyObject *doc, Py_ssize_t index)
{
    PyObject *value = PyDict_GetItemWithError(s->grades, doc);
    if (value == NULL) {
        return PyErr_Occurred() ? -1 : GO_ON;
    }
    long grade = grade_of(value);
    if (grade < 0) {
        return DECLINED;
    }
    if (!s->first_relevant_rank) {
        s->first_relevant_rank = index + 1;
    }
    int added = credit(&s->credited, doc);
    if (added < 0 || (added && found_add(&s->found, grade) < 0)) {
        return -1;
    }
    return GO_ON;
}

/* Reads the arguments after the ranking: 0, DECLINED or -1. */
static int
scoring_start(Scoring *s, PyObject *const *args)
{
    s->grades = args[1];
    s->others = args[2];
    s->credited = NULL;
    s->found.grades = s->found.small;
    s->found.n = 0;
    s->found.capacity = 64;
    s->hits = s->judged_slots = s->first_relevant_rank = 0;
    s->n_relevant = 0;
    s->k = 1;
    s->ideal = s->dcg = 0.0;
    if (max_grade < 0 || !PyDict_CheckExact(s->grades) || !PyDict_CheckExact(s->others) ||
        !PyLong_CheckExact(args[3]) || !PyFloat_CheckExact(args[4]) ||
        !PyLong_CheckExact(args[5])) {
        return DECLINED;
    }
    int overflow = 0;
    s->n_relevant = PyLong_AsLongAndOverflow(args[3], &overflow);
    if (overflow || s->n_relevant != PyDict_GET_SIZE(s->grades)) {
        /* Judgments made by hand with another count: the tail is searched only
         * while ids are missing, which is exact only for the count of grades. */
        return DECLINED;
    }
    s->k = PyLong_AsLongAndOverflow(args[5], &overflow);
    if (overflow || s->k < 1 || s->k > (1L << 30)) {
        return DECLINED; /* k < 1: the Python kernel raises its ValueError */
    }
    s->ideal = PyFloat_AS_DOUBLE(args[4]);
    return GO_ON;
}

static PyObject *
scoring_end(Scoring *s, int outcome, Py_ssize_t filled)
{
    PyObject *result = NULL;
    if (outcome == GO_ON) {
        result = values_of(&s->found, s->n_relevant, s->ideal, s->hits, s->k, s->dcg,
                           s->first_relevant_rank, s->judged_slots, filled);
    }
    Py_XDECREF(s->credited);
    if (s->found.grades != s->found.small) {
        PyMem_Free(s->found.grades);
    }
    if (outcome == DECLINED) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    return result;
}

static PyObject *
kernel_score(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "score(ranked, grades, others, n_relevant, ideal_dcg, k)");
        return NULL;
    }
    PyObject *ranked = args[0];
    if (!PyList_CheckExact(ranked)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    Scoring s;
    int outcome = scoring_start(&s, args);
    Py_ssize_t length = PyList_GET_SIZE(ranked);
    Py_ssize_t top = s.k > NDCG_CUTOFF ? s.k : NDCG_CUTOFF;
    for (Py_ssize_t index = 0; outcome == GO_ON && index < length; index++) {
        if (PyList_GET_SIZE(ranked) != length) {
            outcome = DECLINED; /* changed under us by an __eq__: let Python decide */
            break;
        }
        if (index >= top && s.found.n >= s.n_relevant) {
            break; /* below the top only what is missing is looked for */
        }
        PyObject *doc = PyList_GET_ITEM(ranked, index);
        Py_INCREF(doc); /* the lookups may run __eq__ of str subclasses */
        outcome = index < top ? head_step(&s, doc, index) : tail_step(&s, doc, index);
        Py_DECREF(doc);
    }
    return scoring_end(&s, outcome, length > s.k ? s.k : length);
}

/* Where `doc` first stands as a whole line of text[start:end], or -1 (-2: error). */
static Py_ssize_t
line_of(PyObject *text, PyObject *doc, Py_ssize_t start, Py_ssize_t end)
{
    Py_ssize_t size = PyUnicode_GET_LENGTH(doc);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t from = start; from <= end;) {
        Py_ssize_t at = PyUnicode_Find(text, doc, from, end, 1);
        if (at < 0) {
            return at == -1 ? -1 : -2;
        }
        Py_ssize_t after = at + size;
        if ((at == start || PyUnicode_READ(kind, data, at - 1) == '\n') &&
            (after == end || PyUnicode_READ(kind, data, after) == '\n')) {
            return at;
        }
        from = at + 1;
    }
    return -1;
}

static PyObject *
kernel_score_joined(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "score_joined(text, grades, others, n_relevant, ideal_dcg, k)");
        return NULL;
    }
    PyObject *text = args[0];
    if (!PyUnicode_CheckExact(text)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    Scoring s;
    int outcome = scoring_start(&s, args);
    Py_ssize_t end = PyUnicode_GET_LENGTH(text);
    Py_ssize_t top = s.k > NDCG_CUTOFF ? s.k : NDCG_CUTOFF;
    Py_ssize_t start = 0, index = 0;
    int more = 1; /* a line is left at start (split("\n") gives one more than its newlines) */
    for (; outcome == GO_ON && more && index < top; index++) {
        Py_ssize_t newline = PyUnicode_FindChar(text, '\n', start, end, 1);
        if (newline == -2) {
            outcome = -1;
            break;
        }
        Py_ssize_t stop = newline < 0 ? end : newline;
        PyObject *doc = PyUnicode_Substring(text, start, stop);
        if (doc == NULL) {
            outcome = -1;
            break;
        }
        outcome = head_step(&s, doc, index);
        Py_DECREF(doc);
        more = newline >= 0;
        start = stop + 1;
    }
    Py_ssize_t length = index; /* the ids read, all of them unless more */
    if (outcome == GO_ON && more && s.found.n < s.n_relevant) {
        /* Below the top: each relevant id not yet credited, looked for as a whole
         * line of the tail text (the tail is most of a long ranking and usually
         * holds few of them); the first of them found gives MRR's rank if the top
         * had none. */
        Py_ssize_t first_at = -1, position = 0;
        PyObject *doc, *value;
        while (PyDict_Next(s.grades, &position, &doc, &value)) {
            long grade = grade_of(value);
            if (grade < 0 || !PyUnicode_CheckExact(doc)) {
                outcome = DECLINED;
                break;
            }
            if (s.credited != NULL) {
                int there = PySet_Contains(s.credited, doc);
                if (there) {
                    if (there < 0) {
                        outcome = -1;
                        break;
                    }
                    continue;
                }
            }
            Py_ssize_t newline = PyUnicode_FindChar(doc, '\n', 0, PyUnicode_GET_LENGTH(doc), 1);
            if (newline == -2) {
                outcome = -1;
                break;
            }
            /* An id holding a newline is never one of split("\n")'s lines. */
            Py_ssize_t at = newline >= 0 ? -1 : line_of(text, doc, start, end);
            if (at == -2) {
                outcome = -1;
                break;
            }
            if (at >= 0) {
                if (found_add(&s.found, grade) < 0) {
                    outcome = -1;
                    break;
                }
                if (first_at < 0 || at < first_at) {
                    first_at = at;
                }
            }
        }
        if (outcome == GO_ON && first_at >= 0 && !s.first_relevant_rank) {
            Py_ssize_t above = PyUnicode_Count(text, newline_str, start, first_at);
            if (above < 0) {
                outcome = -1;
            }
            s.first_relevant_rank = top + above + 1;
        }
    }
    /* filled: min(k, number of ids); only whether there are more than k matters. */
    Py_ssize_t filled = more || length > s.k ? s.k : length;
    return scoring_end(&s, outcome, filled);
}

/* ---- Counting into plain lists of numbers: the worker's histograms ---- */

/* `number + addend` as Python computes it (the float case without the generic call;
 * an int addend is converted exactly, as float + int does for these small ones). */
static PyObject *
plus(PyObject *number, PyObject *addend, double addend_value)
{
    if (PyFloat_CheckExact(number)) {
        return PyFloat_FromDouble(PyFloat_AS_DOUBLE(number) + addend_value);
    }
    return PyNumber_Add(number, addend);
}

/* The value of a measure, or -1 when the kernel does not take it (0 otherwise). */
static int
measure_value(PyObject *value, double *out)
{
    if (PyFloat_CheckExact(value)) {
        *out = PyFloat_AS_DOUBLE(value);
        return 0;
    }
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long whole = PyLong_AsLongAndOverflow(value, &overflow);
        if (overflow || whole > (1L << 52) || whole < -(1L << 52)) {
            return -1; /* not exactly a double: Python decides */
        }
        *out = (double)whole;
        return 0;
    }
    return -1;
}

#define MAX_VALUES 64

static PyObject *one_int = NULL;

/* Sets s[index] = s[index] + addend. 0, or -1 with an exception. */
static int
add_at(PyObject *list, Py_ssize_t index, PyObject *addend, double addend_value)
{
    if (index >= PyList_GET_SIZE(list)) { /* shrunk by an __add__ of its own */
        PyErr_SetString(PyExc_IndexError, "observe: a series changed while counted");
        return -1;
    }
    PyObject *number = PyList_GET_ITEM(list, index);
    Py_INCREF(number);
    PyObject *sum = plus(number, addend, addend_value);
    Py_DECREF(number);
    if (sum == NULL) {
        return -1;
    }
    return PyList_SetItem(list, index, sum); /* releases the number it replaces */
}

static PyObject *
kernel_observe(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "observe(targets, values, bounds)");
        return NULL;
    }
    PyObject *targets = args[0], *values = args[1], *bounds = args[2];
    if (!PyTuple_Check(targets) || !(PyTuple_Check(values) || PyList_CheckExact(values)) ||
        !PyTuple_CheckExact(bounds)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values), n_bounds = PyTuple_GET_SIZE(bounds);
    if (n > MAX_VALUES) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *items[MAX_VALUES]; /* borrowed: values is not changed by the counting */
    memcpy(items, PySequence_Fast_ITEMS(values), n * sizeof(PyObject *));
    double value[MAX_VALUES];
    Py_ssize_t bucket[MAX_VALUES];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (measure_value(items[i], &value[i]) < 0) {
            Py_RETURN_NOTIMPLEMENTED;
        }
        /* bisect_left(bounds, value): the first bound not below it. */
        Py_ssize_t lo = 0, hi = n_bounds;
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            PyObject *bound = PyTuple_GET_ITEM(bounds, mid);
            if (!PyFloat_CheckExact(bound)) {
                Py_RETURN_NOTIMPLEMENTED;
            }
            if (PyFloat_AS_DOUBLE(bound) < value[i]) {
                lo = mid + 1;
            }
            else {
                hi = mid;
            }
        }
        bucket[i] = lo;
    }
    /* Everything checked before anything is counted: Python counts what is declined. */
    Py_ssize_t n_targets = PyTuple_GET_SIZE(targets);
    for (Py_ssize_t t = 0; t < n_targets; t++) {
        PyObject *target = PyTuple_GET_ITEM(targets, t);
        if (!PyTuple_Check(target) || PyTuple_GET_SIZE(target) != n + 1) {
            Py_RETURN_NOTIMPLEMENTED; /* Python unpacks n lists and one more */
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *series = PyTuple_GET_ITEM(target, i);
            if (!PyList_CheckExact(series) || PyList_GET_SIZE(series) <= bucket[i]) {
                Py_RETURN_NOTIMPLEMENTED;
            }
        }
    }
    for (Py_ssize_t t = 0; t < n_targets; t++) {
        PyObject *target = PyTuple_GET_ITEM(targets, t);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *series = PyTuple_GET_ITEM(target, i);
            if (add_at(series, bucket[i], one_int, 1.0) < 0 ||
                add_at(series, PyList_GET_SIZE(series) - 1, items[i], value[i]) < 0) {
                return NULL;
            }
        }
    }
    Py_RETURN_NONE;
}

/* ---- RunRollup.add: a result folded into its run's aggregates ------------------------ */

static PyObject *count_str = NULL, *sums_str = NULL, *sumsqs_str = NULL;

/* 0 when every slot of list is an exact float (at least N_MEASURES of them), else -1. */
static int
float_slots(PyObject *list)
{
    if (list == NULL || !PyList_CheckExact(list) || PyList_GET_SIZE(list) < N_MEASURES) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < N_MEASURES; i++) {
        if (!PyFloat_CheckExact(PyList_GET_ITEM(list, i))) {
            return -1;
        }
    }
    return 0;
}

/* aggregates[facet][value], made (by make()) when absent, or the facet's OTHER when it
 * already has limit values: what RunRollup.add looks up. A new reference, or NULL with
 * an exception, or NULL without one when a facet's values are not a dict (declined). */
static PyObject *
aggregate_of(PyObject *by_facet, PyObject *facet, PyObject **value, Py_ssize_t limit,
             PyObject *other, PyObject *make)
{
    PyObject *by_value = PyDict_GetItemWithError(by_facet, facet);
    if (by_value == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        by_value = PyDict_New();
        if (by_value == NULL) {
            return NULL;
        }
        int failed = PyDict_SetItem(by_facet, facet, by_value);
        Py_DECREF(by_value); /* by_facet holds it */
        if (failed < 0) {
            return NULL;
        }
    }
    if (!PyDict_CheckExact(by_value)) {
        return NULL;
    }
    PyObject *aggregate = PyDict_GetItemWithError(by_value, *value);
    if (aggregate == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        if (PyDict_GET_SIZE(by_value) >= limit) {
            *value = other;
            aggregate = PyDict_GetItemWithError(by_value, other);
            if (aggregate == NULL && PyErr_Occurred()) {
                return NULL;
            }
        }
        if (aggregate == NULL) {
            aggregate = PyObject_CallNoArgs(make);
            if (aggregate == NULL) {
                return NULL;
            }
            if (PyDict_SetItem(by_value, *value, aggregate) < 0) {
                Py_DECREF(aggregate);
                return NULL;
            }
            return aggregate;
        }
    }
    Py_INCREF(aggregate);
    return aggregate;
}

#define MAX_AGGREGATES (1 + 64)

static PyObject *
kernel_rollup_add(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "rollup_add(overall, by_facet, values, facets, limit, other, make)");
        return NULL;
    }
    PyObject *overall = args[0], *by_facet = args[1], *values = args[2], *facets = args[3];
    PyObject *other = args[5], *make = args[6];
    Py_ssize_t limit = PyLong_AsSsize_t(args[4]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!(PyTuple_Check(values) || PyList_CheckExact(values)) ||
        PySequence_Fast_GET_SIZE(values) != N_MEASURES || !PyDict_CheckExact(by_facet) ||
        !(facets == Py_None || PyDict_CheckExact(facets)) ||
        (facets != Py_None && PyDict_GET_SIZE(facets) >= MAX_AGGREGATES)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    double value[N_MEASURES], square[N_MEASURES];
    PyObject **items = PySequence_Fast_ITEMS(values);
    for (Py_ssize_t i = 0; i < N_MEASURES; i++) {
        if (measure_value(items[i], &value[i]) < 0) {
            Py_RETURN_NOTIMPLEMENTED;
        }
        square[i] = value[i] * value[i];
    }
    if (!PyType_Check(make) || Py_TYPE(overall) != (PyTypeObject *)make) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *counted = PyDict_New();
    if (counted == NULL) {
        return NULL;
    }
    /* The aggregates to count in, with their lists: all found (made) and checked before
     * anything is counted, so that Python folds whatever is declined. Each is exactly
     * of the class make: setting its count runs no Python code. */
    PyObject *targets[MAX_AGGREGATES], *sums[MAX_AGGREGATES], *sumsqs[MAX_AGGREGATES],
        *counts[MAX_AGGREGATES];
    for (Py_ssize_t t = 0; t < MAX_AGGREGATES; t++) {
        sums[t] = sumsqs[t] = counts[t] = NULL;
    }
    Py_ssize_t n = 0;
    int declined = 0;
    PyObject *result = NULL;
    Py_INCREF(overall);
    targets[n++] = overall;
    if (facets != Py_None) {
        Py_ssize_t position = 0;
        PyObject *facet, *facet_value;
        while (PyDict_Next(facets, &position, &facet, &facet_value)) {
            PyObject *as_counted = facet_value;
            PyObject *aggregate = aggregate_of(by_facet, facet, &as_counted, limit, other, make);
            if (aggregate == NULL) {
                if (PyErr_Occurred()) {
                    goto release;
                }
                declined = 1;
                break;
            }
            targets[n++] = aggregate;
            if (PyDict_SetItem(counted, facet, as_counted) < 0) {
                goto release;
            }
        }
    }
    for (Py_ssize_t t = 0; t < n && !declined; t++) {
        if (Py_TYPE(targets[t]) != (PyTypeObject *)make) {
            declined = 1;
            break;
        }
        counts[t] = PyObject_GetAttr(targets[t], count_str);
        sums[t] = PyObject_GetAttr(targets[t], sums_str);
        sumsqs[t] = PyObject_GetAttr(targets[t], sumsqs_str);
        if (counts[t] == NULL || sums[t] == NULL || sumsqs[t] == NULL) {
            PyErr_Clear(); /* Python raises it */
            declined = 1;
        }
        else if (!PyLong_CheckExact(counts[t]) || float_slots(sums[t]) < 0 ||
                 float_slots(sumsqs[t]) < 0 || sums[t] == sumsqs[t]) {
            /* One list as both would take the square from the sum before it. */
            declined = 1;
        }
    }
    if (!declined) {
        for (Py_ssize_t t = 0; t < n; t++) {
            PyObject *next = PyNumber_Add(counts[t], one_int);
            if (next == NULL) {
                goto release;
            }
            int failed = PyObject_SetAttr(targets[t], count_str, next);
            Py_DECREF(next);
            if (failed < 0) {
                goto release;
            }
            for (Py_ssize_t i = 0; i < N_MEASURES; i++) {
                PyObject *sum = PyFloat_FromDouble(
                    PyFloat_AS_DOUBLE(PyList_GET_ITEM(sums[t], i)) + value[i]);
                PyObject *sumsq = PyFloat_FromDouble(
                    PyFloat_AS_DOUBLE(PyList_GET_ITEM(sumsqs[t], i)) + square[i]);
                if (sum == NULL || sumsq == NULL) {
                    Py_XDECREF(sum);
                    Py_XDECREF(sumsq);
                    goto release;
                }
                PyList_SetItem(sums[t], i, sum); /* releases the number it replaces */
                PyList_SetItem(sumsqs[t], i, sumsq);
            }
        }
        Py_INCREF(counted);
        result = counted;
    }
    else {
        Py_INCREF(Py_NotImplemented);
        result = Py_NotImplemented;
    }
release:
    for (Py_ssize_t t = 0; t < n; t++) {
        Py_XDECREF(counts[t]);
        Py_XDECREF(sums[t]);
        Py_XDECREF(sumsqs[t]);
        Py_DECREF(targets[t]);
    }
    Py_DECREF(counted);
    return result;
}

static PyMethodDef kernel_methods[] = {
    {"configure", kernel_configure, METH_VARARGS,
     "configure(log2_ranks, gains, max_grade, values_type): the Python kernel's tables."},
    {"score", (PyCFunction)(void (*)(void))kernel_score, METH_FASTCALL,
     "score(ranked, grades, others, n_relevant, ideal_dcg, k) -> values or NotImplemented."},
    {"score_joined", (PyCFunction)(void (*)(void))kernel_score_joined, METH_FASTCALL,
     "score_joined(text, ...): score() of text.split('\\n'), without splitting the tail."},
    {"observe", (PyCFunction)(void (*)(void))kernel_observe, METH_FASTCALL,
     "observe(targets, values, bounds): telemetry's histogram counting, or NotImplemented."},
    {"rollup_add", (PyCFunction)(void (*)(void))kernel_rollup_add, METH_FASTCALL,
     "rollup_add(overall, by_facet, values, facets, limit, other, make): RunRollup.add, "
     "or NotImplemented."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "scorer.core._kernel",
    "The compiled scoring kernel (see scorer.core.metrics.score).", -1, kernel_methods, NULL,
    NULL, NULL, NULL,
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
    newline_str = PyUnicode_FromString("\n");
    one_int = PyLong_FromLong(1);
    count_str = PyUnicode_InternFromString("count");
    sums_str = PyUnicode_InternFromString("sums");
    sumsqs_str = PyUnicode_InternFromString("sumsqs");
    if (newline_str == NULL || one_int == NULL || count_str == NULL || sums_str == NULL ||
        sumsqs_str == NULL) {
        Py_DECREF(module);
        return NULL;
    }
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
