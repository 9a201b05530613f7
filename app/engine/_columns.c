/*
 * Output rows to Arrow's column buffers, compiled (optional).
 *
 * app/engine/output.py's RowColumns calls it before pyarrow's conversion of the rows
 * (pa.array of tuples as structs: about 0.6 us a Decimal, 0.25 us an aware datetime).
 * It takes the values the rows hold as the contract's types hold them, each of its
 * exact type (str, int, float, bool, an aware datetime, date, Decimal, or None), and
 * writes the buffers pyarrow's conversion would build from them. Anything else (another
 * type, a subclass, a float that is not finite, a decimal not exact at its column's
 * scale or beyond its precision, a string that is not UTF-8, a row that is not a tuple
 * of the columns) it does not judge: it returns None, and pyarrow's conversion and the
 * output's checks take the rows, as without it. tests/engine/test_native_columns.py
 * holds it to pyarrow's conversion.
 *
 * Built by `make setup`, as app/contract/_envelope.c is.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../_compiled.h"
#include <datetime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* One column being written: its buffers grow as bytes objects, filled in place. */
typedef struct {
    int type;
    int precision;
    int scale;
    Py_ssize_t nulls;
    PyObject *validity; /* bytes: one bit a row, set where not null */
    PyObject *data;     /* bytes: the values (strings: their UTF-8) */
    PyObject *offsets;  /* bytes: int32 offsets, strings only */
    Py_ssize_t used;    /* bytes of data written (strings) */
    PyObject *zone;     /* the last tzinfo seen, and its offset in microseconds */
    long long zone_us;
} Column;

static int grow(PyObject **bytes, Py_ssize_t needed) {
    Py_ssize_t size = PyBytes_GET_SIZE(*bytes);
    if (needed <= size)
        return 0;
    Py_ssize_t bigger = size * 2 > needed ? size * 2 : needed;
    return _PyBytes_Resize(bytes, bigger);
}

/* ``*value`` * 10 + ``digit``, where that stays within int128: pyarrow reads a Decimal as
 * the integer of its digits as written, trailing zeros too, and refuses one past it. */
static int times_ten_plus(int128 *value, int digit) {
    const int128 most = (int128)(((unsigned __int128)1 << 127) - 1);
    if (*value > (most - digit) / 10)
        return 0;
    *value = *value * 10 + digit;
    return 1;
}

/* A Decimal's value as an integer at the column's scale, when exact and within the
 * precision: read from its text (str(Decimal): digits, a point, an exponent). */
static int decimal_unscaled(PyObject *value, const Column *c, int128 *out) {
    PyObject *text = PyObject_Str(value);
    if (text == NULL)
        return 0;
    Py_ssize_t length;
    const char *p = PyUnicode_AsUTF8AndSize(text, &length);
    const char *end = p == NULL ? NULL : p + length;
    int ok = 0, negative = 0, decimals = 0, seen_point = 0;
    int128 unscaled = 0;
    long exponent = 0;
    if (p == NULL)
        goto done;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    for (; p < end && ((*p >= '0' && *p <= '9') || *p == '.'); p++) {
        if (*p == '.') {
            if (seen_point)
                goto done;
            seen_point = 1;
            continue;
        }
        if (!times_ten_plus(&unscaled, *p - '0'))
            goto done;
        decimals += seen_point;
    }
    if (p < end && (*p == 'E' || *p == 'e')) {
        p++;
        int sign = 1;
        if (p < end && (*p == '+' || *p == '-'))
            sign = *p++ == '-' ? -1 : 1;
        if (p == end)
            goto done;
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            exponent = exponent * 10 + (*p - '0');
            if (exponent > 100)
                goto done;
        }
        exponent *= sign;
    }
    if (p != end) /* NaN, Infinity */
        goto done;
    /* value = unscaled * 10^(exponent - decimals); at the scale: * 10^(exponent - decimals + s) */
    long shift = exponent - decimals + c->scale;
    for (; shift > 0; shift--) {
        if (!times_ten_plus(&unscaled, 0))
            goto done; /* past any precision */
    }
    for (; shift < 0; shift++) {
        if (unscaled % 10 != 0)
            goto done; /* not exact at the scale: pyarrow refuses it, with its words */
        unscaled /= 10;
    }
    int128 limit = 1;
    for (int i = 0; i < c->precision; i++)
        limit *= 10;
    if (unscaled >= limit)
        goto done;
    *out = negative ? -unscaled : unscaled;
    ok = 1;
done:
    Py_DECREF(text);
    PyErr_Clear();
    return ok;
}

/* An aware datetime's microseconds since the epoch, in UTC. */
static int datetime_us(PyObject *value, Column *c, long long *out) {
    PyObject *zone = ((PyDateTime_DateTime *)value)->hastzinfo
                         ? ((PyDateTime_DateTime *)value)->tzinfo
                         : NULL;
    if (zone == NULL || zone == Py_None)
        return 0;
    long long offset;
    if (zone == PyDateTime_TimeZone_UTC) {
        offset = 0;
    } else if (zone == c->zone && Py_IS_TYPE(zone, Py_TYPE(PyDateTime_TimeZone_UTC))) {
        offset = c->zone_us; /* a fixed offset (datetime.timezone): the same for every time */
    } else {
        PyObject *delta = PyObject_CallMethod(zone, "utcoffset", "O", value);
        if (delta == NULL || !PyDelta_Check(delta)) {
            Py_XDECREF(delta);
            PyErr_Clear();
            return 0;
        }
        offset = ((long long)PyDateTime_DELTA_GET_DAYS(delta) * 86400 +
                  PyDateTime_DELTA_GET_SECONDS(delta)) * 1000000LL +
                 PyDateTime_DELTA_GET_MICROSECONDS(delta);
        Py_DECREF(delta);
        c->zone = zone; /* borrowed: compared by identity only, while the rows hold it */
        c->zone_us = offset;
    }
    long long days = days_from_civil(PyDateTime_GET_YEAR(value), PyDateTime_GET_MONTH(value),
                                     PyDateTime_GET_DAY(value));
    long long seconds = PyDateTime_DATE_GET_HOUR(value) * 3600LL +
                        PyDateTime_DATE_GET_MINUTE(value) * 60LL +
                        PyDateTime_DATE_GET_SECOND(value);
    *out = (days * 86400LL + seconds) * 1000000LL + PyDateTime_DATE_GET_MICROSECOND(value) - offset;
    return 1;
}

/* One value into its column; 0: not a value this converter takes. */
static int put(Column *c, PyObject *decimal, Py_ssize_t row, PyObject *value) {
    unsigned char *bits = (unsigned char *)PyBytes_AS_STRING(c->validity);
    char *data = PyBytes_AS_STRING(c->data);
    if (value == Py_None) {
        c->nulls++;
        switch (c->type) { /* a null's slot holds zeros, as pyarrow writes it */
        case T_STRING:
            ((int32_t *)PyBytes_AS_STRING(c->offsets))[row + 1] = (int32_t)c->used;
            return 1;
        case T_INT64:
        case T_FLOAT64:
        case T_TIMESTAMP:
            ((int64_t *)data)[row] = 0;
            return 1;
        case T_DATE:
            ((int32_t *)data)[row] = 0;
            return 1;
        case T_DECIMAL:
            memset(data + row * 16, 0, 16);
            return 1;
        default:
            return 1; /* bool: its bits start cleared */
        }
    }
    bits[row >> 3] |= (unsigned char)(1u << (row & 7));
    switch (c->type) {
    case T_STRING: {
        if (!PyUnicode_CheckExact(value))
            return 0;
        Py_ssize_t length;
        const char *text = PyUnicode_AsUTF8AndSize(value, &length);
        if (text == NULL || c->used + length > INT32_MAX) {
            PyErr_Clear();
            return 0;
        }
        if (grow(&c->data, c->used + length) < 0) {
            PyErr_Clear();
            return 0;
        }
        memcpy(PyBytes_AS_STRING(c->data) + c->used, text, (size_t)length);
        c->used += length;
        ((int32_t *)PyBytes_AS_STRING(c->offsets))[row + 1] = (int32_t)c->used;
        return 1;
    }
    case T_INT64: {
        if (!PyLong_CheckExact(value))
            return 0;
        int overflow;
        long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow || (n == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        ((int64_t *)data)[row] = n;
        return 1;
    }
    case T_FLOAT64: {
        if (!PyFloat_CheckExact(value))
            return 0;
        double x = PyFloat_AS_DOUBLE(value);
        if (!isfinite(x))
            return 0;
        ((double *)data)[row] = x;
        return 1;
    }
    case T_BOOL:
        if (value == Py_True)
            ((unsigned char *)data)[row >> 3] |= (unsigned char)(1u << (row & 7));
        else if (value != Py_False)
            return 0;
        return 1;
    case T_TIMESTAMP: {
        long long us;
        if (!PyDateTime_CheckExact(value) || !datetime_us(value, c, &us))
            return 0;
        ((int64_t *)data)[row] = us;
        return 1;
    }
    case T_DATE:
        if (!PyDate_CheckExact(value))
            return 0;
        ((int32_t *)data)[row] = (int32_t)days_from_civil(
            PyDateTime_GET_YEAR(value), PyDateTime_GET_MONTH(value), PyDateTime_GET_DAY(value));
        return 1;
    case T_DECIMAL: {
        int128 unscaled;
        if (!Py_IS_TYPE(value, (PyTypeObject *)decimal) || !decimal_unscaled(value, c, &unscaled))
            return 0;
        memcpy(data + row * 16, &unscaled, 16); /* little-endian two's complement, as Arrow's */
        return 1;
    }
    default:
        return 0;
    }
}

static PyObject *bytes_of(Py_ssize_t size) {
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size > 0 ? size : 1);
    if (bytes != NULL)
        memset(PyBytes_AS_STRING(bytes), 0, (size_t)PyBytes_GET_SIZE(bytes));
    return bytes;
}

/* columns(rows, types, decimal) -> [(null_count, validity, data, offsets), ...] or None. */
static PyObject *columns(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *rows, *types, *decimal;
    if (!PyArg_ParseTuple(args, "O!O!O:columns", &PyList_Type, &rows, &PyTuple_Type, &types,
                          &decimal))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(rows), count = PyTuple_GET_SIZE(types);
    Column *cs = PyMem_Calloc((size_t)(count > 0 ? count : 1), sizeof *cs);
    if (cs == NULL)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    int taken = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        Column *c = &cs[i];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(types, i), "iii:type", &c->type, &c->precision,
                              &c->scale))
            goto fail;
        if (c->type < 0 || c->type >= T_COUNT || c->precision > 38 || c->scale < 0) {
            PyErr_SetString(PyExc_ValueError, "a column type this converter does not know");
            goto fail;
        }
        c->validity = bytes_of((n + 7) / 8);
        c->data = bytes_of(c->type == T_BOOL ? (n + 7) / 8
                           : c->type == T_STRING ? n * 8
                                                 : n * fixed_width(c->type));
        c->offsets = c->type == T_STRING ? bytes_of((n + 1) * 4) : NULL;
        if (c->validity == NULL || c->data == NULL || (c->type == T_STRING && c->offsets == NULL))
            goto fail;
    }
    for (Py_ssize_t r = 0; r < n && taken; r++) {
        PyObject *row = PyList_GET_ITEM(rows, r);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != count) {
            taken = 0;
            break;
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            if (!put(&cs[i], decimal, r, PyTuple_GET_ITEM(row, i))) {
                taken = 0;
                break;
            }
        }
    }
    if (!taken) {
        result = Py_NewRef(Py_None);
        goto fail;
    }
    result = PyList_New(count);
    if (result == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        Column *c = &cs[i];
        if (c->type == T_STRING && _PyBytes_Resize(&c->data, c->used > 0 ? c->used : 1) < 0) {
            Py_CLEAR(result);
            goto fail;
        }
        PyObject *item = Py_BuildValue("(nOOO)", c->nulls, c->nulls ? c->validity : Py_None,
                                       c->data, c->offsets ? c->offsets : Py_None);
        if (item == NULL) {
            Py_CLEAR(result);
            goto fail;
        }
        PyList_SET_ITEM(result, i, item);
    }
fail:
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_XDECREF(cs[i].validity);
        Py_XDECREF(cs[i].data);
        Py_XDECREF(cs[i].offsets);
    }
    PyMem_Free(cs);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS,
     "columns(rows, types, decimal) -> [(null_count, validity, data, offsets)] or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columns", "Output rows to Arrow's buffers, compiled (optional).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__columns(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    /* The interface's number, app/compiled.py's INTERFACE: a module built from older source
     * is left unused, not misread. */
    if (m != NULL && PyModule_AddIntConstant(m, "INTERFACE", 3) < 0)
        Py_CLEAR(m);
    return m;
}
