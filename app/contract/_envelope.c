/*
 * The envelope's compiled decoder (CONTRACT.md sections 1, 1a and rule 7), optional.
 *
 * app/contract/envelope.py's EnvelopeParser calls it first for every record value. It
 * decodes the canonical forms of the envelope and of a declared table schema straight
 * into the values the rows hold (str, int, float, bool, aware datetime, date, Decimal
 * with exactly the column's scale), as the parser's own paths would give them. Anything
 * else (an escape it does not know, an exponent in a decimal, a field it does not
 * declare or one given twice, a time in year 1 or 9999, a value out of range, bytes that
 * are not UTF-8, a message whose fields break the envelope) it does not judge: it
 * returns None and the parser's own paths take the value, which accept it or name what
 * is wrong. So it can only ever be a faster way to the same envelope; the differential
 * tests (tests/contract/test_native_envelope.py) hold it to that.
 *
 * Built by `make setup` (gcc and Python's headers); a checkout without it parses
 * the same way, slower.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stdint.h>
#include <string.h>

/* The column types, in app.contract.envelope's NATIVE_TYPES order. */
enum { T_STRING, T_INT64, T_FLOAT64, T_BOOL, T_TIMESTAMP, T_DATE, T_DECIMAL, T_COUNT };

/* Epoch milliseconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z. */
#define MS_MIN (-62135596800000LL)
#define MS_MAX (253402300799999LL)
#define NUMBER_TEXT 128 /* longer number literals are left to the parser */

/* A reason to leave the value to the parser; no Python error is set. */
#define DEFER 0
#define OK 1

typedef struct {
    const char *name;
    Py_ssize_t length;
    int type;
    int nullable;
    int precision;
    int scale;
} Column;

typedef struct {
    PyObject_HEAD
    Column *columns;
    Py_ssize_t count;
    Py_ssize_t *keys; /* the key columns' indexes, in key order */
    Py_ssize_t *all;  /* every column's index, for a row's object */
    Py_ssize_t key_count;
    PyObject *names;   /* keeps the columns' UTF-8 names alive */
    PyObject *decimal; /* decimal.Decimal */
    PyObject *offsets; /* minutes east of UTC -> datetime.timezone */
} Decoder;

typedef struct {
    const char *at;
    const char *end;
} Cursor;

static void skip_space(Cursor *c) {
    while (c->at < c->end && (*c->at == ' ' || *c->at == '\n' || *c->at == '\r' || *c->at == '\t'))
        c->at++;
}

static int take(Cursor *c, char expected) {
    skip_space(c);
    if (c->at < c->end && *c->at == expected) {
        c->at++;
        return OK;
    }
    return DEFER;
}

static int take_word(Cursor *c, const char *word, Py_ssize_t length) {
    if (c->end - c->at >= length && memcmp(c->at, word, (size_t)length) == 0) {
        c->at += length;
        return OK;
    }
    return DEFER;
}

/* A string without escapes, its bytes between the quotes (not yet checked as UTF-8). */
static int raw_string(Cursor *c, const char **start, Py_ssize_t *length) {
    if (!take(c, '"'))
        return DEFER;
    const char *p = c->at;
    while (p < c->end) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') {
            *start = c->at;
            *length = p - c->at;
            c->at = p + 1;
            return OK;
        }
        if (ch == '\\' || ch < 0x20)
            return DEFER;
        p++;
    }
    return DEFER;
}

static int hex4(const char *p, unsigned *out) {
    unsigned value = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        value <<= 4;
        if (ch >= '0' && ch <= '9')
            value |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            value |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            value |= (unsigned)(ch - 'A' + 10);
        else
            return DEFER;
    }
    *out = value;
    return OK;
}

static char *put_utf8(char *out, unsigned code) {
    if (code < 0x80) {
        *out++ = (char)code;
    } else if (code < 0x800) {
        *out++ = (char)(0xC0 | (code >> 6));
        *out++ = (char)(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
        *out++ = (char)(0xE0 | (code >> 12));
        *out++ = (char)(0x80 | ((code >> 6) & 0x3F));
        *out++ = (char)(0x80 | (code & 0x3F));
    } else {
        *out++ = (char)(0xF0 | (code >> 18));
        *out++ = (char)(0x80 | ((code >> 12) & 0x3F));
        *out++ = (char)(0x80 | ((code >> 6) & 0x3F));
        *out++ = (char)(0x80 | (code & 0x3F));
    }
    return out;
}

/* UTF-8 bytes as a str; bytes that are not UTF-8 are the parser's to refuse. */
static int utf8_str(const char *start, Py_ssize_t length, int ascii, PyObject **out) {
    if (ascii) {
        PyObject *text = PyUnicode_New(length, 127);
        if (text == NULL)
            return DEFER;
        memcpy(PyUnicode_DATA(text), start, (size_t)length);
        *out = text;
        return OK;
    }
    *out = PyUnicode_DecodeUTF8(start, length, "strict");
    if (*out == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    return OK;
}

/* A JSON string as a str: the escapes JSON has; a lone surrogate is the parser's. */
static int json_string(Cursor *c, PyObject **out) {
    if (!take(c, '"'))
        return DEFER;
    const char *start = c->at, *p = c->at;
    int ascii = 1;
    while (p < c->end) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') {
            c->at = p + 1;
            return utf8_str(start, p - start, ascii, out);
        }
        if (ch == '\\')
            break;
        if (ch < 0x20)
            return DEFER;
        if (ch >= 0x80)
            ascii = 0;
        p++;
    }
    if (p >= c->end)
        return DEFER;
    /* Escapes: the text is rebuilt as UTF-8, never longer than the escaped form. */
    char small[512];
    Py_ssize_t room = c->end - start;
    char *buffer = room <= (Py_ssize_t)sizeof small ? small : PyMem_Malloc((size_t)room);
    if (buffer == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    Py_ssize_t plain = p - start;
    memcpy(buffer, start, (size_t)plain);
    char *w = buffer + plain;
    int result = DEFER;
    while (p < c->end) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') {
            c->at = p + 1;
            result = utf8_str(buffer, w - buffer, 0, out);
            break;
        }
        if (ch < 0x20)
            break;
        if (ch != '\\') {
            *w++ = (char)ch;
            p++;
            continue;
        }
        if (c->end - p < 2)
            break;
        char kind = p[1];
        p += 2;
        const char *simple = strchr("\"\\/bfnrt", kind);
        if (kind != '\0' && simple != NULL) {
            static const char meaning[] = "\"\\/\b\f\n\r\t";
            *w++ = meaning[simple - "\"\\/bfnrt"];
            continue;
        }
        if (kind != 'u' || c->end - p < 4)
            break;
        unsigned code;
        if (!hex4(p, &code))
            break;
        p += 4;
        if (code >= 0xD800 && code <= 0xDBFF) {
            unsigned low;
            if (c->end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, &low) ||
                low < 0xDC00 || low > 0xDFFF)
                break;
            p += 6;
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
        } else if (code >= 0xDC00 && code <= 0xDFFF) {
            break;
        }
        w = put_utf8(w, code);
    }
    if (buffer != small)
        PyMem_Free(buffer);
    return result;
}

/* A JSON number's literal, checked against JSON's grammar. */
typedef struct {
    const char *start;
    Py_ssize_t length;
    int negative;
    const char *digits; /* the integer part */
    Py_ssize_t whole;   /* its digits */
    const char *fraction;
    Py_ssize_t decimals;
    int exponent; /* an exponent is written */
} Number;

static int json_number(Cursor *c, Number *n) {
    skip_space(c);
    const char *p = c->at, *end = c->end;
    n->start = p;
    n->negative = 0;
    n->fraction = NULL;
    n->decimals = 0;
    n->exponent = 0;
    if (p < end && *p == '-') {
        n->negative = 1;
        p++;
    }
    n->digits = p;
    if (p < end && *p == '0') {
        p++;
    } else if (p < end && *p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return DEFER;
    }
    n->whole = p - n->digits;
    if (p < end && *p == '.') {
        p++;
        n->fraction = p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        n->decimals = p - n->fraction;
        if (n->decimals == 0)
            return DEFER;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        n->exponent = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        const char *first = p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        if (p == first)
            return DEFER;
    }
    n->length = p - n->start;
    c->at = p;
    return OK;
}

/* An integer literal within int64. */
static int int64_of(const Number *n, long long *out) {
    if (n->fraction != NULL || n->exponent || n->whole > 19)
        return DEFER;
    unsigned long long value = 0;
    for (Py_ssize_t i = 0; i < n->whole; i++) {
        unsigned digit = (unsigned)(n->digits[i] - '0');
        if (value > (ULLONG_MAX - digit) / 10)
            return DEFER;
        value = value * 10 + digit;
    }
    if (n->negative) {
        if (value > (unsigned long long)LLONG_MAX + 1ULL)
            return DEFER;
        *out = value == (unsigned long long)LLONG_MAX + 1ULL ? LLONG_MIN : -(long long)value;
    } else {
        if (value > (unsigned long long)LLONG_MAX)
            return DEFER;
        *out = (long long)value;
    }
    return OK;
}

static int float_of(const Number *n, PyObject **out) {
    if (n->fraction == NULL && !n->exponent) {
        /* An integer literal is the int made a float, so "-0" is 0.0, as float(int) is. */
        int zero = 1;
        for (Py_ssize_t i = 0; i < n->whole; i++)
            if (n->digits[i] != '0')
                zero = 0;
        if (zero) {
            *out = PyFloat_FromDouble(0.0);
            return *out != NULL ? OK : DEFER;
        }
    }
    if (n->length >= NUMBER_TEXT)
        return DEFER;
    char text[NUMBER_TEXT];
    memcpy(text, n->start, (size_t)n->length);
    text[n->length] = '\0';
    char *stop = NULL;
    double value = PyOS_string_to_double(text, &stop, NULL); /* correctly rounded */
    if (value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return DEFER;
    }
    if (stop != text + n->length || Py_IS_INFINITY(value) || Py_IS_NAN(value))
        return DEFER;
    *out = PyFloat_FromDouble(value);
    return *out != NULL ? OK : DEFER;
}

static int digits_of(const char *p, int count, int *out) {
    int value = 0;
    for (int i = 0; i < count; i++) {
        if (p[i] < '0' || p[i] > '9')
            return DEFER;
        value = value * 10 + (p[i] - '0');
    }
    *out = value;
    return OK;
}

static int days_in_month(int year, int month) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (month == 2 && year % 4 == 0 && (year % 100 != 0 || year % 400 == 0))
        return 29;
    return days[month - 1];
}

/* YYYY-MM-DD, a real day of years 1 to 9999. */
static int date_parts(const char *p, int *year, int *month, int *day) {
    if (p[4] != '-' || p[7] != '-' || !digits_of(p, 4, year) || !digits_of(p + 5, 2, month) ||
        !digits_of(p + 8, 2, day))
        return DEFER;
    if (*year < 1 || *month < 1 || *month > 12 || *day < 1 || *day > days_in_month(*year, *month))
        return DEFER;
    return OK;
}

static int date_value(Cursor *c, PyObject **out) {
    const char *text;
    Py_ssize_t length;
    int year, month, day;
    if (!raw_string(c, &text, &length) || length != 10 || !date_parts(text, &year, &month, &day))
        return DEFER;
    *out = PyDate_FromDate(year, month, day);
    if (*out == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    return OK;
}

static PyObject *offset_zone(Decoder *d, int minutes) {
    if (minutes == 0)
        return Py_NewRef(PyDateTime_TimeZone_UTC);
    PyObject *key = PyLong_FromLong(minutes);
    if (key == NULL)
        return NULL;
    PyObject *zone = PyDict_GetItemWithError(d->offsets, key);
    if (zone != NULL) {
        Py_DECREF(key);
        return Py_NewRef(zone);
    }
    PyObject *delta = PyErr_Occurred() ? NULL : PyDelta_FromDSU(0, minutes * 60, 0);
    zone = delta == NULL ? NULL : PyTimeZone_FromOffset(delta);
    Py_XDECREF(delta);
    if (zone != NULL && PyDict_SetItem(d->offsets, key, zone) < 0)
        Py_CLEAR(zone);
    Py_DECREF(key);
    return zone;
}

/* YYYY-MM-DDTHH:MM:SS[.f{1,6}](Z|+HH:MM|-HH:MM), as CONTRACT.md 1a spells a time; its
 * first and last years (which an offset may carry outside years 1 to 9999 in UTC) are
 * the parser's. */
static int time_text(Decoder *d, const char *p, Py_ssize_t length, PyObject **out) {
    int year, month, day, hour, minute, second, micro = 0;
    if (length < 20 || !date_parts(p, &year, &month, &day) || year == 1 || year == 9999)
        return DEFER;
    if (p[10] != 'T' || p[13] != ':' || p[16] != ':' || !digits_of(p + 11, 2, &hour) ||
        !digits_of(p + 14, 2, &minute) || !digits_of(p + 17, 2, &second) || hour > 23 ||
        minute > 59 || second > 59)
        return DEFER;
    Py_ssize_t at = 19;
    if (p[at] == '.') {
        at++;
        int places = 0;
        while (at < length && p[at] >= '0' && p[at] <= '9' && places < 7) {
            micro = micro * 10 + (p[at] - '0');
            at++;
            places++;
        }
        if (places == 0 || places > 6)
            return DEFER;
        for (; places < 6; places++)
            micro *= 10;
    }
    int east;
    if (length - at == 1 && p[at] == 'Z') {
        east = 0;
    } else if (length - at == 6 && (p[at] == '+' || p[at] == '-') && p[at + 3] == ':') {
        int hours, minutes;
        if (!digits_of(p + at + 1, 2, &hours) || !digits_of(p + at + 4, 2, &minutes) ||
            hours > 23 || minutes > 59)
            return DEFER;
        east = (hours * 60 + minutes) * (p[at] == '-' ? -1 : 1);
    } else {
        return DEFER;
    }
    PyObject *zone = offset_zone(d, east);
    if (zone == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    *out = PyDateTimeAPI->DateTime_FromDateAndTime(
        year, month, day, hour, minute, second, micro, zone, PyDateTimeAPI->DateTimeType);
    Py_DECREF(zone);
    if (*out == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    return OK;
}

/* Days since 1970-01-01 as a civil date (Howard Hinnant's days_from_civil, inverted). */
static void civil(long long days, int *year, int *month, int *day) {
    days += 719468;
    long long era = (days >= 0 ? days : days - 146096) / 146097;
    long long of_era = days - era * 146097;
    long long year_of_era = (of_era - of_era / 1460 + of_era / 36524 - of_era / 146096) / 365;
    long long y = year_of_era + era * 400;
    long long of_year = of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    long long mp = (5 * of_year + 2) / 153;
    *day = (int)(of_year - (153 * mp + 2) / 5 + 1);
    *month = (int)(mp < 10 ? mp + 3 : mp - 9);
    *year = (int)(y + (*month <= 2));
}

static int epoch_ms(long long ms, PyObject **out) {
    if (ms < MS_MIN || ms > MS_MAX)
        return DEFER;
    long long days = ms >= 0 ? ms / 86400000 : -((-ms + 86399999) / 86400000);
    long long in_day = ms - days * 86400000;
    int year, month, day;
    civil(days, &year, &month, &day);
    *out = PyDateTimeAPI->DateTime_FromDateAndTime(
        year, month, day, (int)(in_day / 3600000), (int)(in_day / 60000 % 60),
        (int)(in_day / 1000 % 60), (int)(in_day % 1000) * 1000, PyDateTime_TimeZone_UTC,
        PyDateTimeAPI->DateTimeType);
    if (*out == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    return OK;
}

/* A decimal(p,s) from its digits: at most p-s before the point (no leading zero) and s
 * after it, written with exactly s decimals, as quantizing at the scale writes it. */
static int decimal_of(Decoder *d, const Column *column, int negative, const char *whole,
                      Py_ssize_t whole_digits, const char *fraction, Py_ssize_t decimals,
                      PyObject **out) {
    Py_ssize_t significant = whole_digits == 1 && whole[0] == '0' ? 0 : whole_digits;
    if (whole_digits < 1 || (whole_digits > 1 && whole[0] == '0') ||
        significant > column->precision - column->scale || decimals > column->scale)
        return DEFER;
    char text[2 * 40 + 8];
    if (whole_digits + column->scale + 3 > (Py_ssize_t)sizeof text)
        return DEFER;
    char *w = text;
    if (negative)
        *w++ = '-';
    memcpy(w, whole, (size_t)whole_digits);
    w += whole_digits;
    if (column->scale > 0) {
        *w++ = '.';
        memcpy(w, fraction, (size_t)decimals);
        w += decimals;
        for (Py_ssize_t i = decimals; i < column->scale; i++)
            *w++ = '0';
    }
    PyObject *literal = PyUnicode_FromStringAndSize(text, w - text);
    if (literal == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    *out = PyObject_CallOneArg(d->decimal, literal);
    Py_DECREF(literal);
    if (*out == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    return OK;
}

static int decimal_value(Decoder *d, const Column *column, Cursor *c, PyObject **out) {
    skip_space(c);
    if (c->at < c->end && *c->at == '"') {
        const char *text;
        Py_ssize_t length;
        /* A string's digits, as the contract's pattern -?[0-9]+(\.[0-9]+)? has them. */
        if (!raw_string(c, &text, &length) || length == 0 || (text[0] != '-' && (text[0] < '0' || text[0] > '9')))
            return DEFER;
        Cursor inside = {text, text + length};
        Number n;
        if (!json_number(&inside, &n) || inside.at != inside.end || n.exponent)
            return DEFER;
        return decimal_of(d, column, n.negative, n.digits, n.whole, n.fraction, n.decimals, out);
    }
    Number n;
    if (!json_number(c, &n) || n.exponent)
        return DEFER;
    return decimal_of(d, column, n.negative, n.digits, n.whole, n.fraction, n.decimals, out);
}

/* One column's value, as the rows hold it; null where the column is nullable. */
static int value_of(Decoder *d, const Column *column, Cursor *c, PyObject **out) {
    skip_space(c);
    if (c->at >= c->end)
        return DEFER;
    if (*c->at == 'n') {
        if (!column->nullable || !take_word(c, "null", 4))
            return DEFER;
        *out = Py_NewRef(Py_None);
        return OK;
    }
    Number n;
    long long integer;
    switch (column->type) {
    case T_STRING:
        return json_string(c, out);
    case T_INT64:
        if (!json_number(c, &n) || !int64_of(&n, &integer))
            return DEFER;
        *out = PyLong_FromLongLong(integer);
        return *out != NULL ? OK : DEFER;
    case T_FLOAT64:
        return json_number(c, &n) && float_of(&n, out);
    case T_BOOL:
        if (take_word(c, "true", 4)) {
            *out = Py_NewRef(Py_True);
            return OK;
        }
        if (take_word(c, "false", 5)) {
            *out = Py_NewRef(Py_False);
            return OK;
        }
        return DEFER;
    case T_TIMESTAMP:
        if (*c->at == '"') {
            const char *text;
            Py_ssize_t length;
            return raw_string(c, &text, &length) && time_text(d, text, length, out);
        }
        return json_number(c, &n) && int64_of(&n, &integer) && epoch_ms(integer, out);
    case T_DATE:
        return date_value(c, out);
    case T_DECIMAL:
        return decimal_value(d, column, c, out);
    default:
        return DEFER;
    }
}

/* An object of the declared columns (a row: all of them; a deleted key: the key's), each
 * at most once and nothing else; an absent nullable column is null. ``wanted`` lists the
 * columns' indexes; ``cells`` receives one new reference per wanted column. */
static int object_of(Decoder *d, Cursor *c, const Py_ssize_t *wanted, Py_ssize_t count,
                     PyObject **cells) {
    for (Py_ssize_t i = 0; i < count; i++)
        cells[i] = NULL;
    if (!take(c, '{'))
        return DEFER;
    skip_space(c);
    if (c->at < c->end && *c->at == '}') {
        c->at++;
    } else {
        for (;;) {
            const char *name;
            Py_ssize_t length;
            if (!raw_string(c, &name, &length) || !take(c, ':'))
                goto defer;
            Py_ssize_t slot = -1;
            for (Py_ssize_t i = 0; i < count; i++) {
                const Column *column = &d->columns[wanted[i]];
                if (column->length == length && memcmp(column->name, name, (size_t)length) == 0) {
                    slot = i;
                    break;
                }
            }
            if (slot < 0 || cells[slot] != NULL)
                goto defer;
            if (!value_of(d, &d->columns[wanted[slot]], c, &cells[slot]))
                goto defer;
            skip_space(c);
            if (c->at < c->end && *c->at == ',') {
                c->at++;
                continue;
            }
            if (c->at < c->end && *c->at == '}') {
                c->at++;
                break;
            }
            goto defer;
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (cells[i] == NULL) {
            if (!d->columns[wanted[i]].nullable)
                goto defer;
            cells[i] = Py_NewRef(Py_None);
        }
    }
    return OK;
defer:
    for (Py_ssize_t i = 0; i < count; i++)
        Py_CLEAR(cells[i]);
    return DEFER;
}

typedef int (*ItemReader)(Decoder *, Cursor *, PyObject **);

static int row_of(Decoder *d, Cursor *c, PyObject **out) {
    PyObject *row = PyTuple_New(d->count);
    if (row == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    PyObject **cells = &PyTuple_GET_ITEM(row, 0);
    if (!object_of(d, c, d->all, d->count, cells)) {
        Py_DECREF(row); /* its cells were cleared to NULL */
        return DEFER;
    }
    *out = row;
    return OK;
}

/* A deleted key: an object of the key columns, or a one-column key's bare value. */
static int key_of(Decoder *d, Cursor *c, PyObject **out) {
    skip_space(c);
    int bare = c->at < c->end && *c->at != '{';
    if (d->key_count == 1) {
        if (bare)
            return value_of(d, &d->columns[d->keys[0]], c, out);
        return object_of(d, c, d->keys, 1, out);
    }
    if (bare)
        return DEFER;
    PyObject *key = PyTuple_New(d->key_count);
    if (key == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    if (!object_of(d, c, d->keys, d->key_count, &PyTuple_GET_ITEM(key, 0))) {
        Py_DECREF(key);
        return DEFER;
    }
    *out = key;
    return OK;
}

/* null (None) or an array of items (a list). */
static int array_of(Decoder *d, Cursor *c, ItemReader read, PyObject **out) {
    skip_space(c);
    if (take_word(c, "null", 4)) {
        *out = Py_NewRef(Py_None);
        return OK;
    }
    if (!take(c, '['))
        return DEFER;
    PyObject *items = PyList_New(0);
    if (items == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    skip_space(c);
    if (c->at < c->end && *c->at == ']') {
        c->at++;
        *out = items;
        return OK;
    }
    for (;;) {
        PyObject *item;
        if (!read(d, c, &item))
            break;
        int appended = PyList_Append(items, item);
        Py_DECREF(item);
        if (appended < 0) {
            PyErr_Clear();
            break;
        }
        skip_space(c);
        if (c->at < c->end && *c->at == ',') {
            c->at++;
            continue;
        }
        if (c->at < c->end && *c->at == ']') {
            c->at++;
            *out = items;
            return OK;
        }
        break;
    }
    Py_DECREF(items);
    return DEFER;
}

enum { F_SESSION, F_SEQ, F_TYPE, F_TS, F_ROWS, F_DELETED, F_COUNT };
static const char *const FIELDS[F_COUNT] = {"session", "seq", "type", "ts", "rows", "deleted"};
enum { SNAPSHOT, UPDATE, END };

/* decode(value) -> (session, seq, type, ts, rows, deleted) or None: see the top. */
static PyObject *Decoder_decode(Decoder *d, PyObject *value) {
    if (!PyBytes_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "decode takes bytes");
        return NULL;
    }
    Cursor c = {PyBytes_AS_STRING(value), PyBytes_AS_STRING(value) + PyBytes_GET_SIZE(value)};
    PyObject *found[F_COUNT] = {NULL};
    long long seq = 0, ts = 0;
    int type = -1, seen[F_COUNT] = {0};
    PyObject *result = NULL;
    if (!take(&c, '{'))
        goto done;
    for (;;) {
        const char *name;
        Py_ssize_t length;
        if (!raw_string(&c, &name, &length) || !take(&c, ':'))
            goto done;
        int field = -1;
        for (int i = 0; i < F_COUNT; i++)
            if ((Py_ssize_t)strlen(FIELDS[i]) == length && memcmp(FIELDS[i], name, (size_t)length) == 0)
                field = i;
        if (field < 0 || seen[field])
            goto done;
        seen[field] = 1;
        Number n;
        const char *text;
        Py_ssize_t text_length;
        switch (field) {
        case F_SESSION:
            if (!json_string(&c, &found[F_SESSION]))
                goto done;
            break;
        case F_SEQ:
            if (!json_number(&c, &n) || !int64_of(&n, &seq) || seq < 0)
                goto done;
            break;
        case F_TS:
            if (!json_number(&c, &n) || !int64_of(&n, &ts) || ts < MS_MIN || ts > MS_MAX)
                goto done;
            break;
        case F_TYPE:
            if (!raw_string(&c, &text, &text_length))
                goto done;
            if (text_length == 8 && memcmp(text, "snapshot", 8) == 0)
                type = SNAPSHOT;
            else if (text_length == 6 && memcmp(text, "update", 6) == 0)
                type = UPDATE;
            else if (text_length == 3 && memcmp(text, "end", 3) == 0)
                type = END;
            else
                goto done;
            break;
        case F_ROWS:
            if (!array_of(d, &c, row_of, &found[F_ROWS]))
                goto done;
            break;
        case F_DELETED:
            if (!array_of(d, &c, key_of, &found[F_DELETED]))
                goto done;
            break;
        }
        skip_space(&c);
        if (c.at < c.end && *c.at == ',') {
            c.at++;
            continue;
        }
        if (c.at < c.end && *c.at == '}') {
            c.at++;
            break;
        }
        goto done;
    }
    skip_space(&c);
    if (c.at != c.end || !seen[F_SESSION] || !seen[F_SEQ] || !seen[F_TYPE] || !seen[F_TS])
        goto done;
    /* The envelope's shapes (as EnvelopeParser._envelope takes them); the rest is the
     * checked parser's to name. */
    PyObject *rows = found[F_ROWS] == Py_None ? NULL : found[F_ROWS];
    PyObject *deleted = found[F_DELETED] == Py_None ? NULL : found[F_DELETED];
    int no_deleted = deleted == NULL || PyList_GET_SIZE(deleted) == 0;
    int shaped = (type == UPDATE && (rows != NULL || deleted != NULL)) ||
                 (type == SNAPSHOT && rows != NULL && no_deleted) ||
                 (type == END && no_deleted && (rows == NULL || PyList_GET_SIZE(rows) == 0));
    if (!shaped)
        goto done;
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL) {
        PyErr_Clear();
        goto done;
    }
    result = Py_BuildValue(
        "(OLiLOO)", found[F_SESSION], seq, type, ts, rows != NULL ? rows : empty,
        type == UPDATE && deleted != NULL ? deleted : empty);
    Py_DECREF(empty);
    if (result == NULL)
        PyErr_Clear();
done:
    for (int i = 0; i < F_COUNT; i++)
        Py_XDECREF(found[i]);
    if (result == NULL)
        Py_RETURN_NONE;
    return result;
}

static int Decoder_init(Decoder *d, PyObject *args, PyObject *kwargs) {
    PyObject *columns, *keys, *decimal;
    static char *names[] = {"columns", "keys", "decimal", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O:Decoder", names, &PyTuple_Type,
                                     &columns, &PyTuple_Type, &keys, &decimal))
        return -1;
    Py_ssize_t count = PyTuple_GET_SIZE(columns), key_count = PyTuple_GET_SIZE(keys);
    if (count < 1 || key_count < 1 || key_count > count) {
        PyErr_SetString(PyExc_ValueError, "a schema of at least one column and a key among them");
        return -1;
    }
    if (d->columns != NULL) {
        PyErr_SetString(PyExc_TypeError, "a Decoder is made once");
        return -1;
    }
    d->columns = PyMem_Calloc((size_t)count, sizeof *d->columns);
    d->all = PyMem_Calloc((size_t)count, sizeof *d->all);
    d->keys = PyMem_Calloc((size_t)key_count, sizeof *d->keys);
    d->names = PyTuple_New(count);
    d->offsets = PyDict_New();
    if (d->columns == NULL || d->all == NULL || d->keys == NULL || d->names == NULL || d->offsets == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    d->count = count;
    d->key_count = key_count;
    d->decimal = Py_NewRef(decimal);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name;
        d->all[i] = i;
        Column *column = &d->columns[i];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(columns, i), "Uipii:column", &name, &column->type,
                              &column->nullable, &column->precision, &column->scale))
            return -1;
        if (column->type < 0 || column->type >= T_COUNT || column->scale < 0 ||
            column->precision > 38 || column->scale > column->precision) {
            PyErr_SetString(PyExc_ValueError, "a column type this decoder does not know");
            return -1;
        }
        PyObject *encoded = PyUnicode_AsUTF8String(name);
        if (encoded == NULL)
            return -1;
        PyTuple_SET_ITEM(d->names, i, encoded);
        column->name = PyBytes_AS_STRING(encoded);
        column->length = PyBytes_GET_SIZE(encoded);
    }
    for (Py_ssize_t i = 0; i < key_count; i++) {
        Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(keys, i));
        if (index == -1 && PyErr_Occurred())
            return -1;
        if (index < 0 || index >= count) {
            PyErr_SetString(PyExc_ValueError, "a key column's index outside the columns");
            return -1;
        }
        d->keys[i] = index;
    }
    return 0;
}

static void Decoder_dealloc(Decoder *d) {
    PyMem_Free(d->columns);
    PyMem_Free(d->keys);
    PyMem_Free(d->all);
    Py_XDECREF(d->names);
    Py_XDECREF(d->decimal);
    Py_XDECREF(d->offsets);
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static PyMethodDef Decoder_methods[] = {
    {"decode", (PyCFunction)Decoder_decode, METH_O,
     "decode(value) -> (session, seq, type, ts, rows, deleted), or None: the parser's to judge"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.contract._envelope.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoder(columns, keys, decimal): the envelope's canonical forms, decoded in C",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decoder_init,
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_methods = Decoder_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_envelope", "The envelope's compiled decoder (optional).", -1, NULL,
};

PyMODINIT_FUNC PyInit__envelope(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL || PyType_Ready(&DecoderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* The interface's number, app/compiled.py's INTERFACE: a module built from older source
     * is left unused, not misread. */
    if (PyModule_AddIntConstant(m, "INTERFACE", 1) < 0 ||
        PyModule_AddObjectRef(m, "Decoder", (PyObject *)&DecoderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
