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
#include <stdint.h>
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

/* An empty tuple of n items of the tuple subclass type (its items to be set). */
static PyObject *
new_of_type(PyTypeObject *type, Py_ssize_t n)
{
    PyObject *result = type->tp_alloc(type, n);
#if PY_VERSION_HEX >= 0x030E0000
    /* Tuples cache their hash from 3.14 on; -1 is "not computed", as tuple's own
     * constructor of a subtype sets it. */
    if (result != NULL) {
        ((PyTupleObject *)result)->ob_hash = -1;
    }
#endif
    return result;
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
    PyObject *result = new_of_type(values_type, N_MEASURES);
    if (result == NULL) {
        return NULL;
    }
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
    int filtering;
    uint64_t judged[4]; /* a bit per signature of a judged id (`judged_filter`) */
} Scoring;

/* A str whose characters can be read by kind (before 3.12 a string made by the legacy
 * API may not be ready yet: such a one is looked up, never filtered). */
#if PY_VERSION_HEX < 0x030C0000
#define READABLE_STR(o) (PyUnicode_CheckExact(o) && PyUnicode_IS_READY(o))
#else
#define READABLE_STR(o) PyUnicode_CheckExact(o)
#endif

/* Judgments of at most this many ids are filtered (`judged_filter`): past it most of
 * the 256 bits are set and the filter passes nearly every id. */
#define FILTER_MAX_JUDGED 128

/* A signature of an id, 0..255, from its length and six of its characters (code
 * points, so equal strings have equal signatures whatever their storage). */
static inline unsigned
signature_of(PyObject *doc)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(doc);
    int kind = PyUnicode_KIND(doc);
    const void *data = PyUnicode_DATA(doc);
    Py_ssize_t at[6] = {n - 1, n - 2, n - 3, n / 2, n / 3, (2 * n) / 3};
    uint64_t h = (uint64_t)n;
    for (int i = 0; i < 6; i++) {
        Py_UCS4 c = at[i] >= 0 && at[i] < n ? PyUnicode_READ(kind, data, at[i]) : 0;
        h = (h ^ c) * 0x100000001B3ULL;
    }
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 32;
    return (unsigned)(h & 255);
}

/* Sets up the judged-id filter of a ranking of `length` ids: the signatures of every
 * judged id (grades and others). A str id whose signature is not among them is in
 * neither dict (equal strs have equal signatures), so neither is searched: most
 * returned ids are unjudged, and each lookup hashes a new string. Left off when a
 * judged id is not an exact str (a subclass may compare equal to other text), or when
 * building it would cost more than the lookups it can spare. */
static void
judged_filter(Scoring *s, Py_ssize_t length)
{
    s->filtering = 0;
    Py_ssize_t judged = PyDict_GET_SIZE(s->grades) + PyDict_GET_SIZE(s->others);
    if (judged > FILTER_MAX_JUDGED || judged > length) {
        return;
    }
    s->judged[0] = s->judged[1] = s->judged[2] = s->judged[3] = 0;
    PyObject *dicts[2] = {s->grades, s->others};
    for (int d = 0; d < 2; d++) {
        Py_ssize_t position = 0;
        PyObject *key, *value;
        while (PyDict_Next(dicts[d], &position, &key, &value)) {
            if (!READABLE_STR(key)) {
                return;
            }
            unsigned bit = signature_of(key);
            s->judged[bit >> 6] |= (uint64_t)1 << (bit & 63);
        }
    }
    s->filtering = 1;
}

/* False when `doc` is surely no judged id (`judged_filter`); true when it may be. */
static inline int
may_be_judged(const Scoring *s, PyObject *doc)
{
    if (!s->filtering || !READABLE_STR(doc)) {
        return 1;
    }
    unsigned bit = signature_of(doc);
    return (s->judged[bit >> 6] >> (bit & 63)) & 1;
}

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
    s->filtering = 0;
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
    if (outcome == GO_ON) {
        judged_filter(&s, length);
    }
    for (Py_ssize_t index = 0; outcome == GO_ON && index < length; index++) {
        if (PyList_GET_SIZE(ranked) != length) {
            outcome = DECLINED; /* changed under us by an __eq__: let Python decide */
            break;
        }
        if (index >= top && s.found.n >= s.n_relevant) {
            break; /* below the top only what is missing is looked for */
        }
        PyObject *doc = PyList_GET_ITEM(ranked, index);
        if (!may_be_judged(&s, doc)) {
            continue; /* in neither dict: no grade, not judged */
        }
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

/* The run's aggregates a call (rollup_add, fold_rows) counts rows into, their sums kept
 * as doubles until the call returns (Python's float objects made once per aggregate and
 * call, not once per row: the same additions, in the same order, so the same bits). */
typedef struct {
    PyObject *aggregate, *count, *sums, *sumsqs; /* new references */
    Py_ssize_t added;
    double sum[N_MEASURES], sumsq[N_MEASURES];
} Pending;

/* Pointers to indexes, open addressing (a run can have hundreds of facet values). */
typedef struct {
    const void **keys;
    Py_ssize_t *values;
    size_t mask; /* capacity - 1; 0 before the first put */
    Py_ssize_t n;
} PointerMap;

static size_t
pointer_hash(const void *key, size_t mask)
{
    return (size_t)(((uint64_t)(uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ULL >> 17) & mask;
}

/* The index held for key, or -1. */
static Py_ssize_t
pointer_get(const PointerMap *map, const void *key)
{
    if (map->mask == 0) {
        return -1;
    }
    for (size_t at = pointer_hash(key, map->mask);; at = (at + 1) & map->mask) {
        if (map->keys[at] == key) {
            return map->values[at];
        }
        if (map->keys[at] == NULL) {
            return -1;
        }
    }
}

/* 0, or -1 with MemoryError. */
static int
pointer_put(PointerMap *map, const void *key, Py_ssize_t value)
{
    if ((size_t)(2 * (map->n + 1)) > map->mask + 1 || map->mask == 0) {
        size_t capacity = map->mask ? 2 * (map->mask + 1) : 16;
        PointerMap grown = {PyMem_Calloc(capacity, sizeof(void *)),
                            PyMem_Malloc(capacity * sizeof(Py_ssize_t)), capacity - 1, 0};
        if (grown.keys == NULL || grown.values == NULL) {
            PyMem_Free(grown.keys);
            PyMem_Free(grown.values);
            PyErr_NoMemory();
            return -1;
        }
        for (size_t at = 0; map->mask && at <= map->mask; at++) {
            if (map->keys[at] != NULL) {
                pointer_put(&grown, map->keys[at], map->values[at]); /* cannot grow */
            }
        }
        PyMem_Free(map->keys);
        PyMem_Free(map->values);
        *map = grown;
    }
    size_t at = pointer_hash(key, map->mask);
    while (map->keys[at] != NULL && map->keys[at] != key) {
        at = (at + 1) & map->mask;
    }
    if (map->keys[at] == NULL) {
        map->n++;
    }
    map->keys[at] = key;
    map->values[at] = value;
    return 0;
}

static void
pointer_free(PointerMap *map)
{
    PyMem_Free(map->keys);
    PyMem_Free(map->values);
    map->keys = NULL;
    map->values = NULL;
    map->mask = 0;
    map->n = 0;
}

typedef struct {
    Pending *items;
    Py_ssize_t n, size;
    PointerMap by_aggregate; /* aggregate -> index in items */
    PointerMap lists;        /* the items' sums and sumsqs lists */
} PendingSet;

static void
pending_release(PendingSet *set)
{
    for (Py_ssize_t i = 0; i < set->n; i++) {
        Pending *p = &set->items[i];
        Py_DECREF(p->aggregate);
        Py_DECREF(p->count);
        Py_DECREF(p->sums);
        Py_DECREF(p->sumsqs);
    }
    PyMem_Free(set->items);
    set->items = NULL;
    set->n = set->size = 0;
    pointer_free(&set->by_aggregate);
    pointer_free(&set->lists);
}

/* The pending sums of aggregate (an exact instance of make): its index, -2 when its
 * lists are not of floats (declined), -1 with an exception. */
static Py_ssize_t
pending_of(PendingSet *set, PyObject *aggregate, PyObject *make)
{
    Py_ssize_t known = pointer_get(&set->by_aggregate, aggregate);
    if (known >= 0) {
        return known;
    }
    if (Py_TYPE(aggregate) != (PyTypeObject *)make) {
        return -2;
    }
    PyObject *count = PyObject_GetAttr(aggregate, count_str);
    PyObject *sums = count == NULL ? NULL : PyObject_GetAttr(aggregate, sums_str);
    PyObject *sumsqs = sums == NULL ? NULL : PyObject_GetAttr(aggregate, sumsqs_str);
    int declined = sumsqs == NULL || !PyLong_CheckExact(count) || float_slots(sums) < 0 ||
                   float_slots(sumsqs) < 0 || sums == sumsqs;
    /* A list shared with another aggregate would take both's additions. */
    declined = declined || pointer_get(&set->lists, sums) >= 0 ||
               pointer_get(&set->lists, sumsqs) >= 0;
    if (declined) {
        PyErr_Clear(); /* Python raises it */
        Py_XDECREF(count);
        Py_XDECREF(sums);
        Py_XDECREF(sumsqs);
        return -2;
    }
    if (set->n == set->size) {
        Py_ssize_t size = set->size ? 2 * set->size : 4;
        Pending *items = PyMem_Realloc(set->items, size * sizeof(Pending));
        if (items == NULL) {
            Py_DECREF(count);
            Py_DECREF(sums);
            Py_DECREF(sumsqs);
            PyErr_NoMemory();
            return -1;
        }
        set->items = items;
        set->size = size;
    }
    if (pointer_put(&set->by_aggregate, aggregate, set->n) < 0 ||
        pointer_put(&set->lists, sums, set->n) < 0 ||
        pointer_put(&set->lists, sumsqs, set->n) < 0) {
        Py_DECREF(count);
        Py_DECREF(sums);
        Py_DECREF(sumsqs);
        return -1;
    }
    Pending *p = &set->items[set->n];
    Py_INCREF(aggregate);
    p->aggregate = aggregate;
    p->count = count;
    p->sums = sums;
    p->sumsqs = sumsqs;
    p->added = 0;
    for (Py_ssize_t i = 0; i < N_MEASURES; i++) {
        p->sum[i] = PyFloat_AS_DOUBLE(PyList_GET_ITEM(sums, i));
        p->sumsq[i] = PyFloat_AS_DOUBLE(PyList_GET_ITEM(sumsqs, i));
    }
    return set->n++;
}

/* The pending sums written to their aggregates: 0, or -1 with an exception. */
static int
pending_flush(PendingSet *set)
{
    for (Py_ssize_t i = 0; i < set->n; i++) {
        Pending *p = &set->items[i];
        if (!p->added) {
            continue;
        }
        PyObject *added = PyLong_FromSsize_t(p->added);
        PyObject *count = added == NULL ? NULL : PyNumber_Add(p->count, added);
        Py_XDECREF(added);
        if (count == NULL) {
            return -1;
        }
        int failed = PyObject_SetAttr(p->aggregate, count_str, count);
        Py_SETREF(p->count, count);
        if (failed < 0) {
            return -1;
        }
        for (Py_ssize_t m = 0; m < N_MEASURES; m++) {
            PyObject *sum = PyFloat_FromDouble(p->sum[m]);
            PyObject *sumsq = PyFloat_FromDouble(p->sumsq[m]);
            if (sum == NULL || sumsq == NULL) {
                Py_XDECREF(sum);
                Py_XDECREF(sumsq);
                return -1;
            }
            PyList_SetItem(p->sums, m, sum);
            PyList_SetItem(p->sumsqs, m, sumsq);
        }
        p->added = 0;
    }
    return 0;
}

/* The aggregates a row counts in (RunRollup.add's lookups: the overall one, then one per
 * facet value, the facet's OTHER past its limit), as indexes into set: how many, -2
 * when declined, -1 with an exception. counted, when not NULL, gets each facet's value
 * as counted (OTHER past the limit). */
static Py_ssize_t
rollup_targets(PendingSet *set, Py_ssize_t *index, PyObject *overall, PyObject *by_facet,
               PyObject *facets, Py_ssize_t limit, PyObject *other, PyObject *make,
               PyObject *counted)
{
    if (!PyDict_CheckExact(by_facet) ||
        !(facets == Py_None ||
          (PyDict_CheckExact(facets) && PyDict_GET_SIZE(facets) < MAX_AGGREGATES))) {
        return -2;
    }
    Py_ssize_t n = 0;
    index[n] = pending_of(set, overall, make);
    if (index[n] < 0) {
        return index[n];
    }
    n++;
    if (facets != Py_None) {
        Py_ssize_t position = 0;
        PyObject *facet, *facet_value;
        while (PyDict_Next(facets, &position, &facet, &facet_value)) {
            PyObject *as_counted = facet_value;
            PyObject *aggregate = aggregate_of(by_facet, facet, &as_counted, limit, other, make);
            if (aggregate == NULL) {
                return PyErr_Occurred() ? -1 : -2;
            }
            index[n] = pending_of(set, aggregate, make);
            Py_DECREF(aggregate);
            if (index[n] < 0) {
                return index[n];
            }
            n++;
            if (counted != NULL && PyDict_SetItem(counted, facet, as_counted) < 0) {
                return -1;
            }
        }
    }
    return n;
}

/* One row's values counted, pending, into the aggregates at index[0..n). */
static void
pending_add(PendingSet *set, const Py_ssize_t *index, Py_ssize_t n, const double *value)
{
    for (Py_ssize_t t = 0; t < n; t++) {
        Pending *p = &set->items[index[t]];
        p->added++;
        for (Py_ssize_t m = 0; m < N_MEASURES; m++) {
            p->sum[m] += value[m];
            p->sumsq[m] += value[m] * value[m];
        }
    }
}

/* RunRollup.add for one result: its targets resolved (made) and checked before anything
 * is counted, so that Python folds whatever is declined; the facets as counted, or
 * NotImplemented. */
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
        PySequence_Fast_GET_SIZE(values) != N_MEASURES || !PyType_Check(make)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    double value[N_MEASURES];
    PyObject **items = PySequence_Fast_ITEMS(values);
    for (Py_ssize_t i = 0; i < N_MEASURES; i++) {
        if (measure_value(items[i], &value[i]) < 0) {
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    PyObject *counted = PyDict_New();
    if (counted == NULL) {
        return NULL;
    }
    PendingSet set = {0};
    Py_ssize_t index[MAX_AGGREGATES];
    Py_ssize_t n =
        rollup_targets(&set, index, overall, by_facet, facets, limit, other, make, counted);
    if (n > 0) {
        pending_add(&set, index, n, value);
        if (pending_flush(&set) < 0) {
            n = -1;
        }
    }
    pending_release(&set);
    if (n == -2) {
        Py_DECREF(counted);
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (n < 0) {
        Py_CLEAR(counted);
    }
    return counted;
}

/* ---- RunBatch.add_rows: a rollup record's rows folded into their run ----------------
 *
 * scorer/stream/run_state.py's RunBatch.add_rows with per-query marks, for the rows of
 * the common case: a new resultId (no seen entry), past the run's watermark, its
 * values a list of every measure, its query's entry absent or carrying marks that lack
 * the row. It folds rows from `start` until one is not of that case, which it leaves
 * untouched for Python to fold (the same order of operations, the same objects made,
 * the same arithmetic: Python's + on the same numbers). One difference of timing: the
 * run's aggregates get their sums once per call, not once per row (Pending, above).
 * tests/unit/test_fold_kernel.py checks the tables both leave on random batches. */

#define QUERY_ENTRY (2 + 2 * N_MEASURES)
#define WITH_GOLDEN (QUERY_ENTRY + 2)
#define FOLD_ARGS 23

static PyObject *at_str = NULL, *new_str = NULL, *chg_str = NULL, *queries_str = NULL,
                *changed_qrels_str = NULL, *overall_str = NULL, *facets_str = NULL,
                *separator_str = NULL, *one_float = NULL;

/* Python's (offset, seq) <= tuple(mark) for mark = marks.get(stream): 1 or 0 (0 when
 * absent), -1 with an exception, -2 for a mark that is not a pair (declined). */
static int
at_or_below(PyObject *marks, PyObject *stream, PyObject *offset, PyObject *seq)
{
    PyObject *mark = PyDict_GetItemWithError(marks, stream);
    if (mark == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!(PyList_CheckExact(mark) || PyTuple_CheckExact(mark)) ||
        PySequence_Fast_GET_SIZE(mark) != 2) {
        return -2;
    }
    PyObject **item = PySequence_Fast_ITEMS(mark);
    /* A tuple comparison: the first items that differ decide. */
    int same = PyObject_RichCompareBool(offset, item[0], Py_EQ);
    if (same < 0) {
        return -1;
    }
    if (!same) {
        return PyObject_RichCompareBool(offset, item[0], Py_LE);
    }
    same = PyObject_RichCompareBool(seq, item[1], Py_EQ);
    if (same < 0) {
        return -1;
    }
    return same ? 1 : PyObject_RichCompareBool(seq, item[1], Py_LE);
}

/* A new list of the given items (each one a new reference made here). */
static PyObject *
pair_of(PyObject *a, PyObject *b)
{
    PyObject *list = PyList_New(2);
    if (list != NULL) {
        Py_INCREF(a);
        Py_INCREF(b);
        PyList_SET_ITEM(list, 0, a);
        PyList_SET_ITEM(list, 1, b);
    }
    return list;
}

static PyObject *
triple_of(PyObject *a, PyObject *b, PyObject *c)
{
    PyObject *list = PyList_New(3);
    if (list != NULL) {
        Py_INCREF(a);
        Py_INCREF(b);
        Py_INCREF(c);
        PyList_SET_ITEM(list, 0, a);
        PyList_SET_ITEM(list, 1, b);
        PyList_SET_ITEM(list, 2, c);
    }
    return list;
}

/* tuple.__new__(type, items) of a named tuple: a new reference, or NULL. */
static PyObject *
named_tuple(PyTypeObject *type, PyObject *const *items, Py_ssize_t n)
{
    PyObject *result = new_of_type(type, n);
    if (result == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(result, i, items[i]);
    }
    return result;
}

/* target[key] = target[key] + addend (Python's +): 0, or -1 with an exception. */
static int
add_to_item(PyObject *target, PyObject *key, PyObject *addend)
{
    PyObject *held = PyDict_GetItemWithError(target, key);
    if (held == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetObject(PyExc_KeyError, key);
        }
        return -1;
    }
    PyObject *sum = PyNumber_Add(held, addend);
    if (sum == NULL) {
        return -1;
    }
    int failed = PyDict_SetItem(target, key, sum);
    Py_DECREF(sum);
    return failed;
}

/* list[index] = list[index] + addend: 0, or -1 with an exception. */
static int
add_to_slot(PyObject *list, Py_ssize_t index, PyObject *addend)
{
    PyObject *sum = PyNumber_Add(PyList_GET_ITEM(list, index), addend);
    if (sum == NULL) {
        return -1;
    }
    PyList_SetItem(list, index, sum); /* releases the number it replaces */
    return 0;
}

/* What a row folds, once it is known to be of the common case. */
typedef struct {
    PyObject *stream, *offset, *seq, *values, *facets, *confidence, *qrels;
    PyObject *seen_key; /* NULL when resultIds are not checked */
    PyObject *key, *tracked; /* the query entry's key, its entry or None */
} Row;

/* The query entry of a row: made, or folded by its marks (RunBatch._fold_marked with a
 * marked entry that lacks the row, the run counting it). 0, or -1 with an exception. */
static int
fold_entry(Row *row, PyObject *state, PyObject *queries, Py_ssize_t max_queries,
           PyObject *now, PyObject *golden_marks, PyObject *golden_mark)
{
    PyObject *mark = NULL, *entry = NULL, *marks = NULL, *at = NULL, *position = NULL;
    int result = -1;
    if (row->tracked == Py_None) {
        PyObject *count = PyDict_GetItemWithError(state, queries_str);
        if (count == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_KeyError, queries_str);
            }
            return -1;
        }
        Py_ssize_t tracked = PyLong_AsSsize_t(count);
        if (tracked == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (tracked >= max_queries) {
            return 0;
        }
        if (add_to_item(state, queries_str, one_int) < 0) {
            return -1;
        }
        entry = PyList_New(QUERY_ENTRY);
        if (entry == NULL) {
            return -1;
        }
        PyObject **value = PySequence_Fast_ITEMS(row->values);
        Py_INCREF(one_float);
        PyList_SET_ITEM(entry, 0, one_float);
        Py_INCREF(now);
        PyList_SET_ITEM(entry, 1 + N_MEASURES, now);
        for (Py_ssize_t i = 0; i < N_MEASURES; i++) {
            Py_INCREF(value[i]);
            PyList_SET_ITEM(entry, 1 + i, value[i]);
            Py_INCREF(value[i]);
            PyList_SET_ITEM(entry, 2 + N_MEASURES + i, value[i]);
        }
        marks = PyDict_New();
        at = PyDict_New();
        if (marks == NULL || at == NULL) {
            goto done;
        }
        position = pair_of(row->offset, row->seq);
        if (position == NULL || PyDict_SetItem(at, row->stream, position) < 0 ||
            PyDict_SetItem(marks, at_str, at) < 0) {
            goto done;
        }
        Py_DECREF(position);
        position = triple_of(row->stream, row->offset, row->seq);
        if (position == NULL || PyDict_SetItem(marks, new_str, position) < 0) {
            goto done;
        }
    }
    else {
        PyObject *tracked = row->tracked;
        Py_ssize_t n = PyList_GET_SIZE(tracked) - 1; /* the numbers, before the marks */
        PyObject *held = PyList_GET_ITEM(tracked, n);
        marks = PyDict_Copy(held); /* {**marks, "at": at}: the stored entry is left as it was */
        at = PyDict_Copy(PyDict_GetItem(held, at_str));
        position = pair_of(row->offset, row->seq);
        if (marks == NULL || at == NULL || position == NULL ||
            PyDict_SetItem(at, row->stream, position) < 0 ||
            PyDict_SetItem(marks, at_str, at) < 0) {
            goto done;
        }
        entry = PyList_New(n);
        if (entry == NULL) {
            goto done;
        }
        PyObject **value = PySequence_Fast_ITEMS(row->values);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyList_GET_ITEM(tracked, i);
            if (i <= N_MEASURES) {
                item = PyNumber_Add(item, i ? value[i - 1] : one_float);
                if (item == NULL) {
                    goto done;
                }
            }
            else {
                Py_INCREF(item);
            }
            PyList_SET_ITEM(entry, i, item);
        }
    }
    if (row->qrels != Py_None) {
        /* track_golden_set, with golden_mark's cache */
        mark = PyDict_GetItemWithError(golden_marks, row->qrels);
        if (mark != NULL) {
            Py_INCREF(mark);
        }
        else if (PyErr_Occurred() || (mark = PyObject_CallOneArg(golden_mark, row->qrels)) == NULL) {
            goto done;
        }
        Py_ssize_t n = PyList_GET_SIZE(entry);
        if (n != WITH_GOLDEN) {
            /* n is QUERY_ENTRY here: nothing past it to drop */
            if (PyList_Append(entry, mark) < 0 || PyList_Append(entry, one_float) < 0) {
                goto done;
            }
        }
        else {
            int same = PyObject_RichCompareBool(PyList_GET_ITEM(entry, n - 2), mark, Py_EQ);
            if (same < 0) {
                goto done;
            }
            if (same) {
                if (add_to_slot(entry, n - 1, one_float) < 0) {
                    goto done;
                }
            }
            else {
                PyObject *changed = PyNumber_Long(PyList_GET_ITEM(entry, n - 1));
                if (changed == NULL) {
                    goto done;
                }
                Py_INCREF(mark);
                PyList_SetItem(entry, n - 2, mark);
                Py_INCREF(one_float);
                PyList_SetItem(entry, n - 1, one_float);
                int nonzero = PyObject_IsTrue(changed);
                if (nonzero > 0) {
                    PyObject *noted = PyList_New(4);
                    if (noted == NULL) {
                        Py_DECREF(changed);
                        goto done;
                    }
                    Py_INCREF(row->stream);
                    Py_INCREF(row->offset);
                    Py_INCREF(row->seq);
                    Py_INCREF(changed);
                    PyList_SET_ITEM(noted, 0, row->stream);
                    PyList_SET_ITEM(noted, 1, row->offset);
                    PyList_SET_ITEM(noted, 2, row->seq);
                    PyList_SET_ITEM(noted, 3, changed);
                    nonzero = PyDict_SetItem(marks, chg_str, noted);
                    Py_DECREF(noted);
                    if (nonzero == 0) {
                        nonzero = add_to_item(state, changed_qrels_str, changed);
                    }
                }
                Py_DECREF(changed);
                if (nonzero < 0) {
                    goto done;
                }
            }
        }
    }
    if (PyList_Append(entry, marks) < 0 || PyDict_SetItem(queries, row->key, entry) < 0) {
        goto done;
    }
    result = 0;
done:
    Py_XDECREF(mark);
    Py_XDECREF(entry);
    Py_XDECREF(marks);
    Py_XDECREF(at);
    Py_XDECREF(position);
    return result;
}

/* 1 when the query entry `tracked` can be folded here (absent, or marked and lacking the
 * row), 0 when Python must, -1 with an exception. */
static int
entry_takes(PyObject *tracked, Row *row, PyObject *state)
{
    if (tracked == Py_None) {
        /* A new entry: the run's count of tracked queries is compared and added to. */
        PyObject *count = PyDict_GetItemWithError(state, queries_str);
        if (count == NULL) {
            return PyErr_Occurred() ? -1 : 0;
        }
        return PyLong_CheckExact(count);
    }
    if (!PyList_CheckExact(tracked)) {
        return 0;
    }
    Py_ssize_t n = PyList_GET_SIZE(tracked) - 1;
    if ((n != QUERY_ENTRY && n != WITH_GOLDEN) ||
        PyList_GET_ITEM(tracked, N_MEASURES) == Py_None) {
        return 0;
    }
    PyObject *marks = PyList_GET_ITEM(tracked, n);
    if (!PyDict_CheckExact(marks)) {
        return 0;
    }
    PyObject *at = PyDict_GetItemWithError(marks, at_str);
    if (at == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!PyDict_CheckExact(at)) {
        return 0;
    }
    int marked = at_or_below(at, row->stream, row->offset, row->seq);
    return marked == -1 ? -1 : marked == 0;
}

static PyObject *
kernel_fold_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != FOLD_ARGS) {
        PyErr_SetString(PyExc_TypeError, "fold_rows: 23 arguments (RunBatch.add_rows)");
        return NULL;
    }
    PyObject *rows = args[0], *state = args[2], *watermarks = args[3], *run_id = args[4];
    PyObject *rollup = args[5], *other = args[7], *make = args[8], *sketch_add = args[9];
    PyObject *load_seen = args[10], *seen = args[11], *seen_type = args[12];
    PyObject *queries = args[13], *load_query = args[14], *now = args[16];
    PyObject *partition = args[17], *trend = args[18], *streams = args[19];
    PyObject *golden_marks = args[20], *golden_mark = args[21];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), limit = PyLong_AsSsize_t(args[6]);
    Py_ssize_t max_queries = PyLong_AsSsize_t(args[15]), ndcg = PyLong_AsSsize_t(args[22]);
    if ((start == -1 || limit == -1 || max_queries == -1 || ndcg == -1) && PyErr_Occurred()) {
        return NULL;
    }
    if (values_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fold_rows: the kernel is not configured");
        return NULL;
    }
    Py_ssize_t i = start, counted = 0;
    PyObject *overall = NULL, *by_facet = NULL, *prefix = NULL;
    PendingSet pending = {NULL, 0, 0, {NULL, NULL, 0, 0}, {NULL, NULL, 0, 0}};
    Py_ssize_t targets[MAX_AGGREGATES], n_targets = 0;
    double value[N_MEASURES];
    Py_INCREF(trend);
    int usable = PyList_CheckExact(rows) && PyDict_CheckExact(state) &&
                 PyDict_CheckExact(watermarks) && PyUnicode_CheckExact(run_id) &&
                 PyDict_CheckExact(seen) && PyDict_CheckExact(queries) &&
                 PyDict_CheckExact(streams) && PyDict_CheckExact(golden_marks) &&
                 PyType_Check(seen_type) &&
                 (trend == Py_None || (PyList_CheckExact(trend) && PyList_GET_SIZE(trend) == 2)) &&
                 ndcg >= 0 && ndcg < N_MEASURES && start >= 0;
    if (usable) {
        overall = PyObject_GetAttr(rollup, overall_str);
        by_facet = PyObject_GetAttr(rollup, facets_str);
        prefix = PyUnicode_Concat(run_id, separator_str);
        if (overall == NULL || by_facet == NULL || prefix == NULL) {
            goto failed;
        }
    }
    for (; usable && i < PyList_GET_SIZE(rows); i++) {
        PyObject *item = PyList_GET_ITEM(rows, i);
        if (!(PyList_CheckExact(item) || PyTuple_Check(item)) ||
            PySequence_Fast_GET_SIZE(item) != 10) {
            break;
        }
        PyObject **field = PySequence_Fast_ITEMS(item);
        PyObject *topic = field[0], *source = field[1], *result_id = field[4];
        PyObject *query_id = field[5];
        Row row = {NULL, field[2], field[3], field[6], field[7], field[8], field[9], NULL,
                   NULL, NULL};
        if (!PyUnicode_CheckExact(topic) || !PyLong_CheckExact(source) ||
            !PyUnicode_CheckExact(result_id) || !PyUnicode_CheckExact(query_id) ||
            !PyList_CheckExact(row.values) || PyList_GET_SIZE(row.values) != N_MEASURES ||
            !(row.qrels == Py_None || PyUnicode_CheckExact(row.qrels))) {
            break;
        }
        /* The input partition's name, f"{topic}/{source}", kept per (topic, source). */
        PyObject *where = PyTuple_Pack(2, topic, source);
        if (where == NULL) {
            goto failed;
        }
        row.stream = PyDict_GetItemWithError(streams, where);
        if (row.stream != NULL) {
            Py_INCREF(row.stream);
        }
        else if (PyErr_Occurred() ||
                 (row.stream = PyUnicode_FromFormat("%U/%S", topic, source)) == NULL ||
                 PyDict_SetItem(streams, where, row.stream) < 0) {
            Py_DECREF(where);
            Py_XDECREF(row.stream);
            goto failed;
        }
        Py_DECREF(where);
        int take = 1;
        if (load_seen != Py_None) {
            row.seen_key = PyUnicode_Concat(prefix, result_id);
            if (row.seen_key == NULL) {
                goto failed_row;
            }
            PyObject *earlier = PyDict_GetItemWithError(seen, row.seen_key);
            if (earlier != NULL) {
                take = 0; /* counted before in this batch */
            }
            else if (PyErr_Occurred()) {
                goto failed_row;
            }
            else {
                earlier = PyObject_CallOneArg(load_seen, row.seen_key);
                if (earlier == NULL) {
                    goto failed_row;
                }
                take = earlier == Py_None;
                Py_DECREF(earlier);
            }
        }
        if (take) {
            int below = at_or_below(watermarks, row.stream, row.offset, row.seq);
            if (below == -1) {
                goto failed_row;
            }
            take = below == 0;
        }
        if (take) {
            row.key = PyUnicode_Concat(prefix, query_id);
            if (row.key == NULL) {
                goto failed_row;
            }
            row.tracked = PyDict_GetItemWithError(queries, row.key);
            if (row.tracked != NULL) {
                Py_INCREF(row.tracked);
            }
            else if (PyErr_Occurred() ||
                     (row.tracked = PyObject_CallOneArg(load_query, row.key)) == NULL) {
                goto failed_row;
            }
            take = entry_takes(row.tracked, &row, state);
            if (take < 0) {
                goto failed_row;
            }
        }
        if (take) {
            PyObject **items = PySequence_Fast_ITEMS(row.values);
            for (Py_ssize_t m = 0; m < N_MEASURES && take; m++) {
                take = measure_value(items[m], &value[m]) == 0;
            }
        }
        if (take) {
            n_targets = rollup_targets(&pending, targets, overall, by_facet, row.facets, limit,
                                       other, make, NULL);
            if (n_targets == -1) {
                goto failed_row;
            }
            take = n_targets > 0;
        }
        if (!take) {
            /* Python folds this row: nothing of it was changed here. */
            Py_XDECREF(row.seen_key);
            Py_XDECREF(row.key);
            Py_XDECREF(row.tracked);
            Py_DECREF(row.stream);
            break;
        }
        /* Every check made: the row is folded, in add_rows' order. */
        if (row.seen_key != NULL) {
            PyObject *entry_items[5] = {row.stream, row.offset, row.seq, now, partition};
            PyObject *entry = named_tuple((PyTypeObject *)seen_type, entry_items, 5);
            if (entry == NULL || PyDict_SetItem(seen, row.seen_key, entry) < 0) {
                Py_XDECREF(entry);
                goto failed_row;
            }
            Py_DECREF(entry);
        }
        pending_add(&pending, targets, n_targets, value);
        if (fold_entry(&row, state, queries, max_queries, now, golden_marks, golden_mark) < 0) {
            goto failed_row;
        }
        /* The sketch reads no values of a result without a confidence. */
        PyObject *sketched;
        if (row.confidence == Py_None) {
            sketched = PyObject_CallFunctionObjArgs(sketch_add, Py_None, row.values, NULL);
        }
        else {
            PyObject *values = named_tuple(values_type, PySequence_Fast_ITEMS(row.values),
                                           N_MEASURES);
            sketched = values == NULL ? NULL
                                      : PyObject_CallFunctionObjArgs(sketch_add, row.confidence,
                                                                     values, NULL);
            Py_XDECREF(values);
        }
        if (sketched == NULL) {
            goto failed_row;
        }
        Py_DECREF(sketched);
        PyObject *ndcg_value = PyList_GET_ITEM(row.values, ndcg);
        if (trend == Py_None) {
            PyObject *made = pair_of(one_float, ndcg_value);
            if (made == NULL) {
                goto failed_row;
            }
            Py_SETREF(trend, made);
        }
        else if (add_to_slot(trend, 0, one_float) < 0 || add_to_slot(trend, 1, ndcg_value) < 0) {
            goto failed_row;
        }
        PyObject *position = pair_of(row.offset, row.seq);
        if (position == NULL || PyDict_SetItem(watermarks, row.stream, position) < 0) {
            Py_XDECREF(position);
            goto failed_row;
        }
        Py_DECREF(position);
        counted++;
        Py_XDECREF(row.seen_key);
        Py_XDECREF(row.key);
        Py_XDECREF(row.tracked);
        Py_DECREF(row.stream);
        continue;
    failed_row:
        Py_XDECREF(row.seen_key);
        Py_XDECREF(row.key);
        Py_XDECREF(row.tracked);
        Py_DECREF(row.stream);
        goto failed;
    }
    Py_XDECREF(overall);
    Py_XDECREF(by_facet);
    Py_XDECREF(prefix);
    PyObject *result = NULL;
    if (pending_flush(&pending) == 0) {
        result = Py_BuildValue("(nnO)", i, counted, trend);
    }
    pending_release(&pending);
    Py_DECREF(trend);
    return result;
failed:
    Py_XDECREF(overall);
    Py_XDECREF(by_facet);
    Py_XDECREF(prefix);
    /* What was counted before the failing row, as Python would leave it. */
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    if (pending_flush(&pending) < 0) {
        PyErr_Clear();
    }
    PyErr_Restore(type, error, traceback);
    pending_release(&pending);
    Py_DECREF(trend);
    return NULL;
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
    {"fold_rows", (PyCFunction)(void (*)(void))kernel_fold_rows, METH_FASTCALL,
     "fold_rows(rows, start, ...): RunBatch.add_rows of the common rows, from start; "
     "(the first row left to Python, how many counted, the trend)."},
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
    at_str = PyUnicode_InternFromString("at");
    new_str = PyUnicode_InternFromString("new");
    chg_str = PyUnicode_InternFromString("chg");
    queries_str = PyUnicode_InternFromString("queries");
    changed_qrels_str = PyUnicode_InternFromString("changedQrels");
    overall_str = PyUnicode_InternFromString("overall");
    facets_str = PyUnicode_InternFromString("facets");
    separator_str = PyUnicode_FromString("\x1f");
    one_float = PyFloat_FromDouble(1.0);
    if (newline_str == NULL || one_int == NULL || count_str == NULL || sums_str == NULL ||
        sumsqs_str == NULL || at_str == NULL || new_str == NULL || chg_str == NULL ||
        queries_str == NULL || changed_qrels_str == NULL || overall_str == NULL ||
        facets_str == NULL || separator_str == NULL || one_float == NULL) {
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
