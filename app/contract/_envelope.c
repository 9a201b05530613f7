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
#include "../_compiled.h"
#include <datetime.h>
#include <locale.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Epoch milliseconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z. */
#define MS_MIN (-62135596800000LL)
#define MS_MAX (253402300799999LL)
#define NUMBER_TEXT 128 /* longer number literals are left to the parser */

/* The C locale, for strtod_l (made at import; (locale_t)0: not made, Python's reading). */
static locale_t c_locale = (locale_t)0;

/* A reason to leave the value to the parser; no Python error is set. */
#define DEFER 0
#define OK 1

typedef struct {
    const char *name;
    Py_ssize_t length;
    int plain; /* no quote, backslash or control character: JSON writes it as it is */
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

static int double_of(const Number *n, double *out) {
    if (n->fraction == NULL && !n->exponent) {
        /* An integer literal is the int made a float, so "-0" is 0.0, as float(int) is. */
        int zero = 1;
        for (Py_ssize_t i = 0; i < n->whole; i++)
            if (n->digits[i] != '0')
                zero = 0;
        if (zero) {
            *out = 0.0;
            return OK;
        }
    }
    if (!n->exponent && n->whole + n->decimals <= 19 && n->decimals <= 22) {
        /* Clinger's fast path: digits that a double holds exactly, divided by a power of
         * ten it holds exactly, round once, so correctly (as the slow path rounds). */
        static const double powers[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                          1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                          1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
        unsigned long long digits = 0;
        for (Py_ssize_t i = 0; i < n->whole; i++)
            digits = digits * 10 + (unsigned)(n->digits[i] - '0');
        for (Py_ssize_t i = 0; i < n->decimals; i++)
            digits = digits * 10 + (unsigned)(n->fraction[i] - '0');
        if (digits <= (1ULL << 53)) {
            double value = (double)digits / powers[n->decimals];
            *out = n->negative ? -value : value;
            return OK;
        }
    }
    if (n->length >= NUMBER_TEXT)
        return DEFER;
    char text[NUMBER_TEXT];
    memcpy(text, n->start, (size_t)n->length);
    text[n->length] = '\0';
    char *stop = NULL;
    double value;
    if (c_locale != (locale_t)0) {
        /* glibc's reading, correctly rounded as Python's is (so the same double), and two to
         * three times faster on what passes the fast path (1e+300, 17 digits); in the C
         * locale, so a '.' is the point whatever locale a processor sets. An overflow is
         * infinite and an underflow is its rounded value, each with ERANGE: errno is not
         * read, the value decides. */
        value = strtod_l(text, &stop, c_locale);
    } else {
        value = PyOS_string_to_double(text, &stop, NULL); /* correctly rounded */
        if (value == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return DEFER;
        }
    }
    if (stop != text + n->length || Py_IS_INFINITY(value) || Py_IS_NAN(value))
        return DEFER;
    *out = value;
    return OK;
}

static int float_of(const Number *n, PyObject **out) {
    double value;
    if (!double_of(n, &value))
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
typedef struct {
    int year, month, day, hour, minute, second, micro;
    int east; /* minutes east of UTC */
} Time;

static int time_fields(const char *p, Py_ssize_t length, Time *t) {
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
    *t = (Time){year, month, day, hour, minute, second, micro, east};
    return OK;
}

/* A time's fields as a datetime in its own offset, as the parser's paths make it. */
static int datetime_of(Decoder *d, const Time *t, PyObject **out) {
    PyObject *zone = offset_zone(d, t->east);
    if (zone == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    *out = PyDateTimeAPI->DateTime_FromDateAndTime(t->year, t->month, t->day, t->hour,
                                                   t->minute, t->second, t->micro, zone,
                                                   PyDateTimeAPI->DateTimeType);
    Py_DECREF(zone);
    if (*out == NULL) {
        PyErr_Clear();
        return DEFER;
    }
    return OK;
}

static int time_text(Decoder *d, const char *p, Py_ssize_t length, PyObject **out) {
    Time t;
    return time_fields(p, length, &t) && datetime_of(d, &t, out);
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
static int decimal_fits(const Column *column, const char *whole, Py_ssize_t whole_digits,
                        Py_ssize_t decimals) {
    Py_ssize_t significant = whole_digits == 1 && whole[0] == '0' ? 0 : whole_digits;
    return whole_digits >= 1 && !(whole_digits > 1 && whole[0] == '0') &&
           significant <= column->precision - column->scale && decimals <= column->scale;
}

static int decimal_of(Decoder *d, const Column *column, int negative, const char *whole,
                      Py_ssize_t whole_digits, const char *fraction, Py_ssize_t decimals,
                      PyObject **out) {
    if (!decimal_fits(column, whole, whole_digits, decimals))
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
        if (decimals > 0) /* no fraction: no pointer to copy from */
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

/* A decimal's digits, written as a number or as a string of one. */
static int decimal_number(Cursor *c, Number *n) {
    skip_space(c);
    if (c->at < c->end && *c->at == '"') {
        const char *text;
        Py_ssize_t length;
        /* A string's digits, as the contract's pattern -?[0-9]+(\.[0-9]+)? has them. */
        if (!raw_string(c, &text, &length) || length == 0 || (text[0] != '-' && (text[0] < '0' || text[0] > '9')))
            return DEFER;
        Cursor inside = {text, text + length};
        return json_number(&inside, n) && inside.at == inside.end && !n->exponent;
    }
    return json_number(c, n) && !n->exponent;
}

static int decimal_value(Decoder *d, const Column *column, Cursor *c, PyObject **out) {
    Number n;
    return decimal_number(c, &n) &&
           decimal_of(d, column, n.negative, n.digits, n.whole, n.fraction, n.decimals, out);
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

/* The next field's name in an object of the columns ``wanted`` and its colon: its index
 * among them to ``slot`` (-1: none of them). Writers put the columns in one order, so
 * the one after the last (``hint``) is tried first, its name matched in place (a plain
 * name is its JSON string's bytes). */
static int field_slot(Decoder *d, Cursor *c, const Py_ssize_t *wanted, Py_ssize_t count,
                      Py_ssize_t hint, Py_ssize_t *slot) {
    const Column *next = hint < count ? &d->columns[wanted[hint]] : NULL;
    *slot = -1;
    skip_space(c);
    if (next != NULL && next->plain && c->end - c->at > next->length + 1 && c->at[0] == '"' &&
        c->at[next->length + 1] == '"' &&
        memcmp(c->at + 1, next->name, (size_t)next->length) == 0) {
        c->at += next->length + 2;
        *slot = hint;
        return take(c, ':');
    }
    const char *name;
    Py_ssize_t length;
    if (!raw_string(c, &name, &length))
        return DEFER;
    for (Py_ssize_t i = 0; i < count; i++) {
        const Column *column = &d->columns[wanted[i]];
        if (column->length == length && memcmp(column->name, name, (size_t)length) == 0) {
            *slot = i;
            break;
        }
    }
    return take(c, ':');
}

/* What follows an object's member or an array's item: a ',' and another (NEXT), the
 * container's ``close`` (CLOSED), or anything else (STRAY); a ',' or ``close`` is taken. */
enum { STRAY, CLOSED, NEXT };

static int after_item(Cursor *c, char close) {
    if (take(c, ','))
        return NEXT;
    return take(c, close) ? CLOSED : STRAY;
}

/* One field's value, ``slot`` its index among the object's columns, read into ``target``;
 * DEFER for a field given twice, or a value the reader does not take. */
typedef int (*FieldReader)(Decoder *, Cursor *, void *target, Py_ssize_t slot);

/* An object of the columns ``wanted`` from its '{' to its '}', each field read by ``read``:
 * only declared fields, each at most once (the reader refuses a repeat). */
static int object_fields(Decoder *d, Cursor *c, const Py_ssize_t *wanted, Py_ssize_t count,
                         FieldReader read, void *target) {
    if (!take(c, '{'))
        return DEFER;
    if (take(c, '}'))
        return OK;
    Py_ssize_t hint = 0;
    for (;;) {
        Py_ssize_t slot;
        if (!field_slot(d, c, wanted, count, hint, &slot) || slot < 0 || !read(d, c, target, slot))
            return DEFER;
        hint = slot + 1;
        int after = after_item(c, '}');
        if (after != NEXT)
            return after == CLOSED ? OK : DEFER;
    }
}

typedef struct {
    const Py_ssize_t *wanted;
    PyObject **cells;
} Cells;

static int cell_read(Decoder *d, Cursor *c, void *target, Py_ssize_t slot) {
    Cells *into = target;
    return into->cells[slot] == NULL &&
           value_of(d, &d->columns[into->wanted[slot]], c, &into->cells[slot]);
}

/* An object of the declared columns (a row: all of them; a deleted key: the key's), each
 * at most once and nothing else; an absent nullable column is null. ``wanted`` lists the
 * columns' indexes; ``cells`` receives one new reference per wanted column. */
static int object_of(Decoder *d, Cursor *c, const Py_ssize_t *wanted, Py_ssize_t count,
                     PyObject **cells) {
    for (Py_ssize_t i = 0; i < count; i++)
        cells[i] = NULL;
    Cells into = {wanted, cells};
    if (!object_fields(d, c, wanted, count, cell_read, &into))
        goto defer;
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

/* One item of an array; ``store``: where a row goes (decode_into), else NULL. */
typedef int (*ItemReader)(Decoder *, Cursor *, void *store, PyObject **);

static int row_of(Decoder *d, Cursor *c, void *store, PyObject **out) {
    (void)store;
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
static int key_of(Decoder *d, Cursor *c, void *store, PyObject **out) {
    (void)store;
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
static int array_of(Decoder *d, Cursor *c, ItemReader read, void *store, PyObject **out) {
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
    int after = take(c, ']') ? CLOSED : NEXT;
    while (after == NEXT) {
        PyObject *item;
        if (!read(d, c, store, &item))
            break;
        int appended = PyList_Append(items, item);
        Py_DECREF(item);
        if (appended < 0) {
            PyErr_Clear();
            break;
        }
        after = after_item(c, ']');
    }
    if (after == CLOSED) {
        *out = items;
        return OK;
    }
    Py_DECREF(items);
    return DEFER;
}

/* ---------------------------------------------------------------------------------------
 * The rows' store: rows written straight into Arrow's column buffers.
 *
 * The built-in processor never reads a row's values: its output is each message's own
 * rows, and its table only needs each row's key until the state is saved. So for it,
 * Decoder.decode_into writes a message's rows here, as the output's columns (the
 * buffers pyarrow's conversion of the same values would give), and gives back only
 * their keys as Python values; RowColumns takes the output's rows from these columns
 * by index. A row becomes a tuple (RowStore.rows) only where Python asks for it: the
 * rows a table still holds when a run ends, or a sequence's items. Each cell keeps what
 * the tuple of the parser's other paths holds: a time its offset, a decimal its scale
 * (a negative zero, which Decimal keeps and an integer cannot, is left to the parser).
 * ------------------------------------------------------------------------------------- */

typedef struct {
    unsigned char *valid; /* one bit a row, set where not null */
    char *data;           /* the values: fixed width; bools one bit a row; strings UTF-8 */
    int32_t *offsets;     /* strings: where each row's text starts, rows + 1 of them */
    int16_t *zones;       /* timestamps: the minutes east of UTC each was written in */
    Py_ssize_t used;      /* strings: bytes of data written */
    Py_ssize_t room;      /* strings: bytes data holds */
} Builder;

typedef struct {
    PyObject_HEAD
    Decoder *decoder;
    Builder *builders;
    Py_ssize_t rows;     /* rows written */
    Py_ssize_t capacity; /* rows the buffers hold */
    Py_ssize_t *seen;    /* per column: the stamp of the last row that gave it */
    Py_ssize_t stamp;
    PyObject *dirty;     /* a list the engine keeps its tables' handles in (app.engine) */
} RowStore;

static PyTypeObject RowStoreType;
static PyTypeObject DecoderType;

static int regrow(void **buffer, size_t size) {
    void *bigger = PyMem_Realloc(*buffer, size > 0 ? size : 1);
    if (bigger == NULL)
        return DEFER;
    *buffer = bigger;
    return OK;
}

/* Room for one more row in every column. */
static int reserve_row(RowStore *s) {
    if (s->rows < s->capacity)
        return OK;
    Py_ssize_t capacity = s->capacity < 1024 ? 1024 : s->capacity * 2;
    Decoder *d = s->decoder;
    for (Py_ssize_t i = 0; i < d->count; i++) {
        Builder *b = &s->builders[i];
        int type = d->columns[i].type;
        size_t bits = (size_t)(capacity + 7) / 8;
        if (!regrow((void **)&b->valid, bits))
            return DEFER;
        if (type == T_BOOL && !regrow((void **)&b->data, bits))
            return DEFER;
        if (fixed_width(type) && !regrow((void **)&b->data, (size_t)(capacity * fixed_width(type))))
            return DEFER;
        if (type == T_STRING && !regrow((void **)&b->offsets, (size_t)(capacity + 1) * 4))
            return DEFER;
        if (type == T_TIMESTAMP && !regrow((void **)&b->zones, (size_t)capacity * 2))
            return DEFER;
    }
    s->capacity = capacity;
    return OK;
}

static void put_bit(unsigned char *bits, Py_ssize_t row, int on) {
    unsigned char mask = (unsigned char)(1u << (row & 7));
    if (on)
        bits[row >> 3] |= mask;
    else
        bits[row >> 3] &= (unsigned char)~mask;
}

static int get_bit(const unsigned char *bits, Py_ssize_t row) {
    return (bits[row >> 3] >> (row & 7)) & 1;
}

/* A null in row ``row``: its slot zeroed, as pyarrow writes one. */
static void put_null(Builder *b, int type, Py_ssize_t row) {
    put_bit(b->valid, row, 0);
    if (type == T_STRING)
        b->offsets[row + 1] = (int32_t)b->used;
    else if (type == T_BOOL)
        put_bit((unsigned char *)b->data, row, 0);
    else
        memset(b->data + row * fixed_width(type), 0, (size_t)fixed_width(type));
    if (type == T_TIMESTAMP)
        b->zones[row] = 0;
}

/* UTF-8 as Unicode defines it well formed (what Python's strict decoder takes). */
static int utf8_valid(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char ch = s[i];
        if (ch < 0x80) {
            i++;
            continue;
        }
        int need;
        unsigned char low = 0x80, high = 0xBF;
        if (ch >= 0xC2 && ch <= 0xDF)
            need = 1;
        else if (ch == 0xE0)
            need = 2, low = 0xA0;
        else if ((ch >= 0xE1 && ch <= 0xEC) || ch == 0xEE || ch == 0xEF)
            need = 2;
        else if (ch == 0xED)
            need = 2, high = 0x9F; /* no surrogates */
        else if (ch == 0xF0)
            need = 3, low = 0x90;
        else if (ch >= 0xF1 && ch <= 0xF3)
            need = 3;
        else if (ch == 0xF4)
            need = 3, high = 0x8F; /* nothing past U+10FFFF */
        else
            return DEFER;
        if (n - i <= need || s[i + 1] < low || s[i + 1] > high)
            return DEFER;
        for (int k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return DEFER;
        i += need + 1;
    }
    return OK;
}

/* A JSON string's text appended to a string column (its escapes resolved, as
 * json_string resolves them). */
static int string_into(Cursor *c, Builder *b, Py_ssize_t row) {
    if (!take(c, '"'))
        return DEFER;
    const char *p = c->at;
    /* The text is never longer than its escaped form. */
    Py_ssize_t most = c->end - p;
    if (b->used + most > INT32_MAX)
        return DEFER;
    if (b->used + most > b->room) {
        Py_ssize_t room = b->room * 2 > b->used + most ? b->room * 2 : b->used + most;
        if (!regrow((void **)&b->data, (size_t)room))
            return DEFER;
        b->room = room;
    }
    char *start = b->data + b->used, *w = start;
    int ascii = 1;
    while (p < c->end) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') {
            c->at = p + 1;
            if (!ascii && !utf8_valid((const unsigned char *)start, w - start))
                return DEFER;
            b->used += w - start;
            b->offsets[row + 1] = (int32_t)b->used;
            put_bit(b->valid, row, 1);
            return OK;
        }
        if (ch < 0x20)
            return DEFER;
        if (ch != '\\') {
            ascii &= ch < 0x80;
            *w++ = (char)ch;
            p++;
            continue;
        }
        if (c->end - p < 2)
            return DEFER;
        char kind = p[1];
        p += 2;
        const char *simple = strchr("\"\\/bfnrt", kind);
        if (kind != '\0' && simple != NULL) {
            static const char meaning[] = "\"\\/\b\f\n\r\t";
            *w++ = meaning[simple - "\"\\/bfnrt"];
            continue;
        }
        unsigned code;
        if (kind != 'u' || c->end - p < 4 || !hex4(p, &code))
            return DEFER;
        p += 4;
        if (code >= 0xD800 && code <= 0xDBFF) {
            unsigned low;
            if (c->end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, &low) ||
                low < 0xDC00 || low > 0xDFFF)
                return DEFER;
            p += 6;
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
        } else if (code >= 0xDC00 && code <= 0xDFFF) {
            return DEFER;
        }
        w = put_utf8(w, code);
    }
    return DEFER;
}

static long long floor_div(long long a, long long b) {
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* One column's value of row ``row`` into its builder; null where the column is nullable. */
static int value_into(const Column *column, Cursor *c, Builder *b, Py_ssize_t row) {
    skip_space(c);
    if (c->at >= c->end)
        return DEFER;
    if (*c->at == 'n') {
        if (!column->nullable || !take_word(c, "null", 4))
            return DEFER;
        put_null(b, column->type, row);
        return OK;
    }
    Number n;
    long long integer;
    switch (column->type) {
    case T_STRING:
        return string_into(c, b, row);
    case T_INT64:
        if (!json_number(c, &n) || !int64_of(&n, &integer))
            return DEFER;
        ((int64_t *)b->data)[row] = integer;
        break;
    case T_FLOAT64: {
        double x;
        if (!json_number(c, &n) || !double_of(&n, &x))
            return DEFER;
        ((double *)b->data)[row] = x;
        break;
    }
    case T_BOOL:
        if (take_word(c, "true", 4))
            put_bit((unsigned char *)b->data, row, 1);
        else if (take_word(c, "false", 5))
            put_bit((unsigned char *)b->data, row, 0);
        else
            return DEFER;
        break;
    case T_TIMESTAMP: {
        long long us;
        int east = 0;
        if (*c->at == '"') {
            const char *text;
            Py_ssize_t length;
            Time t;
            if (!raw_string(c, &text, &length) || !time_fields(text, length, &t))
                return DEFER;
            long long seconds = days_from_civil(t.year, t.month, t.day) * 86400LL +
                                t.hour * 3600LL + t.minute * 60LL + t.second - t.east * 60LL;
            us = seconds * 1000000LL + t.micro;
            east = t.east;
        } else {
            if (!json_number(c, &n) || !int64_of(&n, &integer) || integer < MS_MIN ||
                integer > MS_MAX)
                return DEFER;
            us = integer * 1000LL;
        }
        ((int64_t *)b->data)[row] = us;
        b->zones[row] = (int16_t)east;
        break;
    }
    case T_DATE: {
        const char *text;
        Py_ssize_t length;
        int year, month, day;
        if (!raw_string(c, &text, &length) || length != 10 || !date_parts(text, &year, &month, &day))
            return DEFER;
        ((int32_t *)b->data)[row] = (int32_t)days_from_civil(year, month, day);
        break;
    }
    case T_DECIMAL: {
        if (!decimal_number(c, &n) || !decimal_fits(column, n.digits, n.whole, n.decimals))
            return DEFER;
        int128 unscaled = 0;
        for (Py_ssize_t i = 0; i < n.whole; i++)
            unscaled = unscaled * 10 + (n.digits[i] - '0');
        for (Py_ssize_t i = 0; i < column->scale; i++)
            unscaled = unscaled * 10 + (i < n.decimals ? n.fraction[i] - '0' : 0);
        if (n.negative && unscaled == 0)
            return DEFER; /* Decimal keeps the sign of a zero; an integer cannot */
        if (n.negative)
            unscaled = -unscaled;
        memcpy(b->data + row * 16, &unscaled, 16); /* little-endian two's complement, as Arrow's */
        break;
    }
    default:
        return DEFER;
    }
    put_bit(b->valid, row, 1);
    return OK;
}

/* A cell of the store as the parser's other paths give it (a new reference). */
static PyObject *cell_of(RowStore *s, Py_ssize_t column, Py_ssize_t row) {
    Builder *b = &s->builders[column];
    const Column *col = &s->decoder->columns[column];
    if (!get_bit(b->valid, row))
        return Py_NewRef(Py_None);
    switch (col->type) {
    case T_STRING:
        return PyUnicode_DecodeUTF8(b->data + b->offsets[row],
                                    b->offsets[row + 1] - b->offsets[row], "strict");
    case T_INT64:
        return PyLong_FromLongLong(((int64_t *)b->data)[row]);
    case T_FLOAT64:
        return PyFloat_FromDouble(((double *)b->data)[row]);
    case T_BOOL:
        return Py_NewRef(get_bit((unsigned char *)b->data, row) ? Py_True : Py_False);
    case T_TIMESTAMP: {
        int east = b->zones[row];
        long long local = ((int64_t *)b->data)[row] + east * 60000000LL;
        long long days = floor_div(local, 86400000000LL);
        long long in_day = local - days * 86400000000LL;
        int year, month, day;
        civil(days, &year, &month, &day);
        Time t = {year,
                  month,
                  day,
                  (int)(in_day / 3600000000LL),
                  (int)(in_day / 60000000LL % 60),
                  (int)(in_day / 1000000LL % 60),
                  (int)(in_day % 1000000LL),
                  east};
        PyObject *out = NULL;
        if (!datetime_of(s->decoder, &t, &out) && !PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a time the store cannot make");
        return out;
    }
    case T_DATE: {
        int year, month, day;
        civil(((int32_t *)b->data)[row], &year, &month, &day);
        return PyDate_FromDate(year, month, day);
    }
    case T_DECIMAL: {
        int128 unscaled;
        memcpy(&unscaled, b->data + row * 16, 16);
        unsigned __int128 magnitude = unscaled < 0 ? -(unsigned __int128)unscaled
                                                   : (unsigned __int128)unscaled;
        char digits[48], text[56];
        int count = 0;
        do {
            digits[count++] = (char)('0' + (int)(magnitude % 10));
            magnitude /= 10;
        } while (magnitude > 0);
        while (count <= col->scale) /* at least one digit before the point */
            digits[count++] = '0';
        char *w = text;
        if (unscaled < 0)
            *w++ = '-';
        for (int i = count - 1; i >= 0; i--) {
            *w++ = digits[i];
            if (i == col->scale && i > 0)
                *w++ = '.';
        }
        PyObject *literal = PyUnicode_FromStringAndSize(text, w - text);
        if (literal == NULL)
            return NULL;
        PyObject *out = PyObject_CallOneArg(s->decoder->decimal, literal);
        Py_DECREF(literal);
        return out;
    }
    default:
        PyErr_SetString(PyExc_ValueError, "a column type the store does not know");
        return NULL;
    }
}

static PyObject *row_tuple(RowStore *s, Py_ssize_t row) {
    if (row < 0 || row >= s->rows) {
        PyErr_Format(PyExc_IndexError, "row %zd of a store of %zd", row, s->rows);
        return NULL;
    }
    Py_ssize_t count = s->decoder->count;
    PyObject *tuple = PyTuple_New(count);
    if (tuple == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *cell = cell_of(s, i, row);
        if (cell == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, cell);
    }
    return tuple;
}

/* The row's key, as the parser's other paths give it: one column's value, or a tuple. */
static PyObject *key_at(RowStore *s, Py_ssize_t row) {
    Decoder *d = s->decoder;
    if (d->key_count == 1)
        return cell_of(s, d->keys[0], row);
    PyObject *key = PyTuple_New(d->key_count);
    if (key == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < d->key_count; i++) {
        PyObject *cell = cell_of(s, d->keys[i], row);
        if (cell == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        PyTuple_SET_ITEM(key, i, cell);
    }
    return key;
}

/* A row's field into its column's builder, at the row being written (the stamp marks the
 * fields it has given). */
static int store_read(Decoder *d, Cursor *c, void *target, Py_ssize_t slot) {
    RowStore *s = target;
    if (s->seen[slot] == s->stamp)
        return DEFER;
    s->seen[slot] = s->stamp;
    return value_into(&d->columns[slot], c, &s->builders[slot], s->rows);
}

/* One row object into the store (an ItemReader's), its key (a new reference) to ``key``. */
static int row_into(Decoder *d, Cursor *c, void *store, PyObject **key) {
    RowStore *s = store;
    if (!reserve_row(s))
        return DEFER;
    Py_ssize_t row = s->rows, stamp = ++s->stamp;
    if (!object_fields(d, c, d->all, d->count, store_read, s))
        return DEFER;
    for (Py_ssize_t i = 0; i < d->count; i++) {
        if (s->seen[i] != stamp) {
            if (!d->columns[i].nullable)
                return DEFER;
            put_null(&s->builders[i], d->columns[i].type, row);
        }
    }
    s->rows = row + 1;
    *key = key_at(s, row);
    if (*key == NULL) {
        PyErr_Clear();
        s->rows = row;
        return DEFER;
    }
    return OK;
}

/* The store back to its first ``rows`` rows (a message it took in part). */
static void truncate_to(RowStore *s, Py_ssize_t rows) {
    s->rows = rows;
    for (Py_ssize_t i = 0; i < s->decoder->count; i++)
        if (s->decoder->columns[i].type == T_STRING)
            s->builders[i].used = s->builders[i].offsets[rows];
}

/* RowStore(decoder): an empty store of the decoder's columns. */
static int RowStore_init(RowStore *s, PyObject *args, PyObject *kwargs) {
    PyObject *decoder;
    static char *names[] = {"decoder", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!:RowStore", names, &DecoderType,
                                     &decoder))
        return -1;
    if (s->decoder != NULL) {
        PyErr_SetString(PyExc_TypeError, "a RowStore is made once");
        return -1;
    }
    Decoder *d = (Decoder *)decoder;
    if (d->columns == NULL) {
        PyErr_SetString(PyExc_ValueError, "a Decoder not yet made");
        return -1;
    }
    s->builders = PyMem_Calloc((size_t)d->count, sizeof *s->builders);
    s->seen = PyMem_Calloc((size_t)d->count, sizeof *s->seen);
    s->dirty = PyList_New(0);
    if (s->builders == NULL || s->seen == NULL || s->dirty == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->decoder = (Decoder *)Py_NewRef(decoder);
    for (Py_ssize_t i = 0; i < d->count; i++) {
        if (d->columns[i].type == T_STRING) {
            s->builders[i].offsets = PyMem_Calloc(1, sizeof(int32_t)); /* the first: 0 */
            if (s->builders[i].offsets == NULL) {
                PyErr_NoMemory();
                return -1;
            }
        }
    }
    return 0;
}

static void RowStore_dealloc(RowStore *s) {
    if (s->builders != NULL && s->decoder != NULL) {
        for (Py_ssize_t i = 0; i < s->decoder->count; i++) {
            PyMem_Free(s->builders[i].valid);
            PyMem_Free(s->builders[i].data);
            PyMem_Free(s->builders[i].offsets);
            PyMem_Free(s->builders[i].zones);
        }
    }
    PyMem_Free(s->builders);
    PyMem_Free(s->seen);
    Py_XDECREF(s->dirty);
    Py_XDECREF(s->decoder);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static Py_ssize_t RowStore_length(RowStore *s) {
    return s->rows;
}

static PyObject *RowStore_row(RowStore *s, PyObject *index) {
    Py_ssize_t row = PyLong_AsSsize_t(index);
    if (row == -1 && PyErr_Occurred())
        return NULL;
    return row_tuple(s, row);
}

static PyObject *RowStore_rows(RowStore *s, PyObject *indexes) {
    PyObject *items = PySequence_Fast(indexes, "rows takes a sequence of row numbers");
    if (items == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        Py_ssize_t row = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(items, i));
        PyObject *tuple = row == -1 && PyErr_Occurred() ? NULL : row_tuple(s, row);
        if (tuple == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, tuple);
    }
    Py_DECREF(items);
    return out;
}

/* A buffer of ``size`` bytes, zeroed (bits past the rows are Arrow's zero padding). */
static PyObject *zeroed(Py_ssize_t size) {
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size > 0 ? size : 1);
    if (bytes != NULL)
        memset(PyBytes_AS_STRING(bytes), 0, (size_t)PyBytes_GET_SIZE(bytes));
    return bytes;
}

static PyObject *copy_bytes(const void *from, Py_ssize_t size) {
    PyObject *bytes = zeroed(size);
    if (bytes != NULL && size > 0)
        memcpy(PyBytes_AS_STRING(bytes), from, (size_t)size);
    return bytes;
}

/* How many of the first ``rows`` bits of ``bits`` are set. */
static Py_ssize_t count_set(const unsigned char *bits, Py_ssize_t rows) {
    Py_ssize_t set = 0;
    for (Py_ssize_t i = 0; i < rows / 8; i++)
        set += __builtin_popcount(bits[i]);
    for (Py_ssize_t r = rows / 8 * 8; r < rows; r++)
        set += get_bit(bits, r);
    return set;
}

/* A bit buffer of ``rows`` bits, the bits past them cleared (Arrow's form). */
static PyObject *copy_bits(const unsigned char *bits, Py_ssize_t rows) {
    PyObject *bytes = copy_bytes(bits, (rows + 7) / 8);
    if (bytes != NULL && rows % 8)
        PyBytes_AS_STRING(bytes)[rows / 8] &= (char)((1u << (rows % 8)) - 1);
    return bytes;
}

/* columns() -> [(null_count, validity, data, offsets), ...]: every row's buffers, copied,
 * in the form app.engine._columns.columns gives them. */
static PyObject *RowStore_columns(RowStore *s, PyObject *unused) {
    (void)unused;
    Decoder *d = s->decoder;
    Py_ssize_t rows = s->rows;
    PyObject *out = PyList_New(d->count);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < d->count; i++) {
        Builder *b = &s->builders[i];
        int type = d->columns[i].type;
        Py_ssize_t valid = rows > 0 ? count_set(b->valid, rows) : 0;
        PyObject *validity = valid < rows ? copy_bits(b->valid, rows) : Py_NewRef(Py_None);
        PyObject *data = type == T_BOOL     ? copy_bits((unsigned char *)b->data, rows)
                         : type == T_STRING ? copy_bytes(b->data, b->offsets[rows])
                                            : copy_bytes(b->data, rows * fixed_width(type));
        PyObject *offsets = type == T_STRING ? copy_bytes(b->offsets, (rows + 1) * 4)
                                             : Py_NewRef(Py_None);
        PyObject *item = validity == NULL || data == NULL || offsets == NULL
                             ? NULL
                             : Py_BuildValue("(nOOO)", rows - valid, validity, data, offsets);
        Py_XDECREF(validity);
        Py_XDECREF(data);
        Py_XDECREF(offsets);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

/* Where one column's rows are read from: the store's builder, or buffers of the same form
 * (the compiled converter's, of rows the store does not hold). */
typedef struct {
    const unsigned char *valid; /* NULL: every row valid */
    const char *data;
    const int32_t *offsets;
} Source;

/* ``other``'s buffers of one column of ``rows`` rows as a Source, their sizes checked;
 * 0 with an error set where they cannot be. */
static int other_source(PyObject *other, int type, Py_ssize_t rows, Source *out) {
    if (!PyTuple_Check(other) || PyTuple_GET_SIZE(other) != 4) {
        PyErr_SetString(PyExc_TypeError, "gather: each other column is (nulls, validity, data, "
                                         "offsets)");
        return 0;
    }
    PyObject *valid = PyTuple_GET_ITEM(other, 1), *data = PyTuple_GET_ITEM(other, 2),
             *offsets = PyTuple_GET_ITEM(other, 3);
    Py_ssize_t bits = (rows + 7) / 8;
    Py_ssize_t need = type == T_BOOL ? bits : type == T_STRING ? 0 : rows * fixed_width(type);
    if ((valid != Py_None && (!PyBytes_Check(valid) || PyBytes_GET_SIZE(valid) < bits)) ||
        !PyBytes_Check(data) || PyBytes_GET_SIZE(data) < need ||
        (type == T_STRING) != (offsets != Py_None) ||
        (offsets != Py_None &&
         (!PyBytes_Check(offsets) || PyBytes_GET_SIZE(offsets) < (rows + 1) * 4))) {
        PyErr_SetString(PyExc_ValueError, "gather: an other column's buffers do not fit its rows");
        return 0;
    }
    out->valid = valid == Py_None ? NULL : (const unsigned char *)PyBytes_AS_STRING(valid);
    out->data = PyBytes_AS_STRING(data);
    out->offsets = offsets == Py_None ? NULL : (const int32_t *)PyBytes_AS_STRING(offsets);
    if (out->offsets != NULL) {
        const int32_t *o = out->offsets;
        if (o[0] < 0 || o[rows] > PyBytes_GET_SIZE(data)) {
            PyErr_SetString(PyExc_ValueError, "gather: an other column's offsets pass its data");
            return 0;
        }
        for (Py_ssize_t r = 0; r < rows; r++)
            if (o[r + 1] < o[r]) {
                PyErr_SetString(PyExc_ValueError, "gather: an other column's offsets go back");
                return 0;
            }
    }
    return 1;
}

/* ``count`` bits of ``from`` from bit ``first`` or-ed into the cleared ``to`` from bit ``at``
 * (``from`` NULL: all set). Without a branch on each bit: nulls fall anywhere. */
static void or_bits(unsigned char *to, Py_ssize_t at, const unsigned char *from,
                    Py_ssize_t first, Py_ssize_t count) {
    for (Py_ssize_t r = 0; r < count; r++) {
        Py_ssize_t in = first + r, out = at + r;
        unsigned bit = from == NULL ? 1u : (from[in >> 3] >> (in & 7)) & 1u;
        to[out >> 3] |= (unsigned char)(bit << (out & 7));
    }
}

/* One column of the runs' rows, into (null_count, validity, data, offsets). */
static PyObject *gather_column(int type, const Source *sources, const Py_ssize_t *firsts,
                               const Py_ssize_t *counts, const int *from, Py_ssize_t runs,
                               Py_ssize_t rows) {
    Py_ssize_t width = fixed_width(type), used = 0;
    if (type == T_STRING) {
        for (Py_ssize_t k = 0; k < runs; k++) {
            const int32_t *o = sources[from[k]].offsets;
            used += o[firsts[k] + counts[k]] - o[firsts[k]];
        }
        if (used > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "gather: the strings pass 2 GiB");
            return NULL;
        }
    }
    PyObject *valid = zeroed((rows + 7) / 8);
    /* Bits are set one at a time, so a bool's start zeroed; every other byte is written. */
    PyObject *data = type == T_BOOL     ? zeroed((rows + 7) / 8)
                     : type == T_STRING ? PyBytes_FromStringAndSize(NULL, used > 0 ? used : 1)
                                        : PyBytes_FromStringAndSize(NULL, rows > 0 ? rows * width
                                                                                   : 1);
    PyObject *offsets = type == T_STRING ? zeroed((rows + 1) * 4) : Py_NewRef(Py_None);
    if (valid == NULL || data == NULL || offsets == NULL) {
        Py_XDECREF(valid);
        Py_XDECREF(data);
        Py_XDECREF(offsets);
        return NULL;
    }
    unsigned char *v = (unsigned char *)PyBytes_AS_STRING(valid);
    char *out = PyBytes_AS_STRING(data);
    int32_t *out_offsets = type == T_STRING ? (int32_t *)PyBytes_AS_STRING(offsets) : NULL;
    Py_ssize_t at = 0, written = 0;
    for (Py_ssize_t k = 0; k < runs; k++) {
        const Source *src = &sources[from[k]];
        Py_ssize_t first = firsts[k], count = counts[k];
        or_bits(v, at, src->valid, first, count);
        if (type == T_BOOL) {
            or_bits((unsigned char *)out, at, (const unsigned char *)src->data, first, count);
        } else if (type == T_STRING) {
            const int32_t *o = src->offsets;
            int32_t base = o[first];
            for (Py_ssize_t r = 0; r < count; r++)
                out_offsets[at + r + 1] = (int32_t)(written + (o[first + r + 1] - base));
            if (o[first + count] > base)
                memcpy(out + written, src->data + base, (size_t)(o[first + count] - base));
            written += o[first + count] - base;
        } else if (count > 0) {
            memcpy(out + at * width, src->data + first * width, (size_t)(count * width));
        }
        at += count;
    }
    Py_ssize_t nulls = rows - count_set(v, rows);
    if (nulls == 0) {
        Py_DECREF(valid);
        valid = Py_NewRef(Py_None);
    }
    PyObject *item = Py_BuildValue("(nOOO)", nulls, valid, data, offsets);
    Py_DECREF(valid);
    Py_DECREF(data);
    Py_DECREF(offsets);
    return item;
}

/* gather(starts, counts, others, other_rows) -> [(null_count, validity, data, offsets), ...]:
 * the rows of the runs, in order, of every column, in columns()'s form. A run is a first
 * place and a length: a place >= 0 is the store's row, ~i the row i of ``others`` (the
 * compiled converter's columns of ``other_rows`` rows the store does not hold; None when
 * there are none). One copy, where the store's columns and a take were two. */
static PyObject *RowStore_gather(RowStore *s, PyObject *args) {
    PyObject *starts, *counts, *others;
    Py_ssize_t other_rows;
    if (!PyArg_ParseTuple(args, "O!O!On:gather", &PyList_Type, &starts, &PyList_Type, &counts,
                          &others, &other_rows))
        return NULL;
    Decoder *d = s->decoder;
    Py_ssize_t runs = PyList_GET_SIZE(starts);
    if (PyList_GET_SIZE(counts) != runs || other_rows < 0 ||
        (others != Py_None &&
         (!PyList_Check(others) || PyList_GET_SIZE(others) != d->count))) {
        PyErr_SetString(PyExc_ValueError, "gather: starts and counts of one length, and the "
                                          "others a list of every column (or None)");
        return NULL;
    }
    Py_ssize_t *firsts = PyMem_Calloc((size_t)runs + 1, sizeof *firsts);
    Py_ssize_t *lengths = PyMem_Calloc((size_t)runs + 1, sizeof *lengths);
    int *from = PyMem_Calloc((size_t)runs + 1, sizeof *from);
    PyObject *out = NULL;
    if (firsts == NULL || lengths == NULL || from == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t rows = 0, merged = 0;
    for (Py_ssize_t k = 0; k < runs; k++) {
        Py_ssize_t start = PyLong_AsSsize_t(PyList_GET_ITEM(starts, k));
        Py_ssize_t count = PyLong_AsSsize_t(PyList_GET_ITEM(counts, k));
        if ((start == -1 || count == -1) && PyErr_Occurred())
            goto done;
        int other = start < 0;
        Py_ssize_t first = other ? ~start : start, held = other ? other_rows : s->rows;
        if (count < 0 || first > held - count || (other && others == Py_None)) {
            PyErr_Format(PyExc_IndexError, "gather: run %zd (%zd rows at %zd) outside its rows",
                         k, count, start);
            goto done;
        }
        rows += count;
        if (merged > 0 && from[merged - 1] == other &&
            firsts[merged - 1] + lengths[merged - 1] == first) {
            lengths[merged - 1] += count; /* a run that goes on where the last ended */
            continue;
        }
        firsts[merged] = first;
        lengths[merged] = count;
        from[merged] = other;
        merged++;
    }
    out = PyList_New(d->count);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < d->count; i++) {
        Builder *b = &s->builders[i];
        int type = d->columns[i].type;
        Source sources[2] = {{b->valid, b->data, b->offsets}, {NULL, NULL, NULL}};
        if (others != Py_None &&
            !other_source(PyList_GET_ITEM(others, i), type, other_rows, &sources[1])) {
            Py_CLEAR(out);
            goto done;
        }
        PyObject *item = gather_column(type, sources, firsts, lengths, from, merged, rows);
        if (item == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, item);
    }
done:
    PyMem_Free(firsts);
    PyMem_Free(lengths);
    PyMem_Free(from);
    return out;
}

static PyObject *RowStore_truncate(RowStore *s, PyObject *index) {
    Py_ssize_t rows = PyLong_AsSsize_t(index);
    if (rows == -1 && PyErr_Occurred())
        return NULL;
    if (rows < 0 || rows > s->rows) {
        PyErr_Format(PyExc_IndexError, "truncate to %zd rows of %zd", rows, s->rows);
        return NULL;
    }
    truncate_to(s, rows);
    Py_RETURN_NONE;
}

/* settle(live): the places (ints) the tables noted in ``dirty`` hold for their keys made
 * the rows' tuples, in the tables whose id() is in the set ``live``; dirty emptied. */
static PyObject *RowStore_settle(RowStore *s, PyObject *live) {
    if (!PyAnySet_Check(live)) {
        PyErr_SetString(PyExc_TypeError, "settle takes a set of the live tables' ids");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(s->dirty);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyList_GET_ITEM(s->dirty, i);
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2 ||
            !PyDict_CheckExact(PyTuple_GET_ITEM(entry, 0)) ||
            !PyList_CheckExact(PyTuple_GET_ITEM(entry, 1))) {
            PyErr_SetString(PyExc_TypeError, "dirty holds (table, keys) pairs");
            return NULL;
        }
        PyObject *table = PyTuple_GET_ITEM(entry, 0), *keys = PyTuple_GET_ITEM(entry, 1);
        PyObject *id = PyLong_FromVoidPtr(table);
        if (id == NULL)
            return NULL;
        int found = PySet_Contains(live, id);
        Py_DECREF(id);
        if (found < 0)
            return NULL;
        if (!found)
            continue; /* a table a snapshot replaced since: no session's */
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(keys); k++) {
            PyObject *key = PyList_GET_ITEM(keys, k);
            PyObject *place = PyDict_GetItemWithError(table, key);
            if (place == NULL) {
                if (PyErr_Occurred())
                    return NULL;
                continue; /* deleted since */
            }
            if (!PyLong_CheckExact(place))
                continue; /* a row already */
            Py_ssize_t row = PyLong_AsSsize_t(place);
            if (row == -1 && PyErr_Occurred())
                return NULL;
            PyObject *tuple = row_tuple(s, row);
            if (tuple == NULL)
                return NULL;
            int set = PyDict_SetItem(table, key, tuple);
            Py_DECREF(tuple);
            if (set < 0)
                return NULL;
        }
    }
    if (PyList_SetSlice(s->dirty, 0, n, NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef RowStore_methods[] = {
    {"settle", (PyCFunction)RowStore_settle, METH_O,
     "settle(live): the noted tables' places made rows, in the tables whose id() is in live"},
    {"row", (PyCFunction)RowStore_row, METH_O, "row(i) -> the row's tuple"},
    {"rows", (PyCFunction)RowStore_rows, METH_O, "rows(indexes) -> a list of the rows' tuples"},
    {"columns", (PyCFunction)RowStore_columns, METH_NOARGS,
     "columns() -> [(null_count, validity, data, offsets), ...] of every row"},
    {"truncate", (PyCFunction)RowStore_truncate, METH_O, "truncate(n): keep the first n rows"},
    {"gather", (PyCFunction)RowStore_gather, METH_VARARGS,
     "gather(starts, counts, others, other_rows) -> the runs' rows in columns()'s form"},
    {NULL, NULL, 0, NULL},
};

static PyObject *RowStore_dirty(RowStore *s, void *closure) {
    (void)closure;
    return Py_NewRef(s->dirty);
}

static PyObject *RowStore_decoder(RowStore *s, void *closure) {
    (void)closure;
    return Py_NewRef((PyObject *)s->decoder);
}

static PyGetSetDef RowStore_getset[] = {
    {"decoder", (getter)RowStore_decoder, NULL, "the decoder whose columns it holds", NULL},
    {"dirty", (getter)RowStore_dirty, NULL, "a list the engine notes its tables' handles in",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods RowStore_sequence = {.sq_length = (lenfunc)RowStore_length};

static PyTypeObject RowStoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.contract._envelope.RowStore",
    .tp_basicsize = sizeof(RowStore),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RowStore(decoder): rows written as Arrow's column buffers",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RowStore_init,
    .tp_dealloc = (destructor)RowStore_dealloc,
    .tp_methods = RowStore_methods,
    .tp_getset = RowStore_getset,
    .tp_as_sequence = &RowStore_sequence,
};

/* ---------------------------------------------------------------------------------------
 * A message's rows in a store: RowSpan(store, first, keys), made by decode_into. A
 * sequence of the rows' tuples for any reader; the built-in processor reads only its
 * keys, and puts the rows' places (ints) in its table (place, table), noting the table
 * in the store's ``dirty`` for RowStore.settle.
 * ------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    RowStore *store;
    Py_ssize_t first;
    PyObject *keys; /* a list: the rows' keys, in order */
} RowSpan;

static PyTypeObject RowSpanType;

static PyObject *span_of(RowStore *store, Py_ssize_t first, PyObject *keys) {
    RowSpan *span = PyObject_New(RowSpan, &RowSpanType);
    if (span == NULL)
        return NULL;
    span->store = (RowStore *)Py_NewRef((PyObject *)store);
    span->first = first;
    span->keys = Py_NewRef(keys);
    return (PyObject *)span;
}

static void RowSpan_dealloc(RowSpan *span) {
    Py_XDECREF(span->store);
    Py_XDECREF(span->keys);
    PyObject_Free(span);
}

static Py_ssize_t RowSpan_length(RowSpan *span) {
    return PyList_GET_SIZE(span->keys);
}

static PyObject *RowSpan_item(RowSpan *span, Py_ssize_t i) {
    if (i < 0 || i >= PyList_GET_SIZE(span->keys)) {
        PyErr_SetString(PyExc_IndexError, "row index out of range");
        return NULL;
    }
    return row_tuple(span->store, span->first + i);
}

static PyObject *RowSpan_subscript(RowSpan *span, PyObject *item) {
    Py_ssize_t n = PyList_GET_SIZE(span->keys);
    if (PyIndex_Check(item)) {
        Py_ssize_t i = PyNumber_AsSsize_t(item, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred())
            return NULL;
        return RowSpan_item(span, i < 0 ? i + n : i);
    }
    if (!PySlice_Check(item)) {
        PyErr_Format(PyExc_TypeError, "rows are indexed by integers or slices, not %.100s",
                     Py_TYPE(item)->tp_name);
        return NULL;
    }
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(item, &start, &stop, &step) < 0)
        return NULL;
    Py_ssize_t count = PySlice_AdjustIndices(n, &start, &stop, step);
    PyObject *rows = PyList_New(count);
    for (Py_ssize_t k = 0; rows != NULL && k < count; k++) {
        PyObject *row = row_tuple(span->store, span->first + start + k * step);
        if (row == NULL)
            Py_CLEAR(rows);
        else
            PyList_SET_ITEM(rows, k, row);
    }
    return rows;
}

/* The rows' places into ``table`` (a dict), the table noted in the store's dirty list. */
static int place_into(RowSpan *span, PyObject *table) {
    Py_ssize_t n = PyList_GET_SIZE(span->keys);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *place = PyLong_FromSsize_t(span->first + i);
        if (place == NULL)
            return -1;
        int set = PyDict_SetItem(table, PyList_GET_ITEM(span->keys, i), place);
        Py_DECREF(place);
        if (set < 0)
            return -1;
    }
    PyObject *entry = PyTuple_Pack(2, table, span->keys);
    if (entry == NULL)
        return -1;
    int appended = PyList_Append(span->store->dirty, entry);
    Py_DECREF(entry);
    return appended;
}

static PyObject *RowSpan_place(RowSpan *span, PyObject *table) {
    if (!PyDict_CheckExact(table)) {
        PyErr_SetString(PyExc_TypeError, "place takes a dict");
        return NULL;
    }
    if (place_into(span, table) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *RowSpan_table(RowSpan *span, PyObject *unused) {
    (void)unused;
    PyObject *table = PyDict_New();
    if (table != NULL && place_into(span, table) < 0)
        Py_CLEAR(table);
    return table;
}

static PyObject *RowSpan_get_store(RowSpan *span, void *closure) {
    (void)closure;
    return Py_NewRef((PyObject *)span->store);
}

static PyObject *RowSpan_get_first(RowSpan *span, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(span->first);
}

static PyObject *RowSpan_get_keys(RowSpan *span, void *closure) {
    (void)closure;
    return Py_NewRef(span->keys);
}

static PyObject *RowSpan_repr(RowSpan *span) {
    return PyUnicode_FromFormat("RowSpan(rows %zd to %zd of a store)", span->first,
                                span->first + PyList_GET_SIZE(span->keys) - 1);
}

static PyGetSetDef RowSpan_getset[] = {
    {"store", (getter)RowSpan_get_store, NULL, "the store holding the rows", NULL},
    {"first", (getter)RowSpan_get_first, NULL, "the first row's place in the store", NULL},
    {"keys", (getter)RowSpan_get_keys, NULL, "the rows' keys, in order", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef RowSpan_methods[] = {
    {"place", (PyCFunction)RowSpan_place, METH_O,
     "place(table): table[key] = the row's place, for each row; the table noted in dirty"},
    {"table", (PyCFunction)RowSpan_table, METH_NOARGS,
     "table() -> a new dict of the rows' places by key, noted in dirty"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods RowSpan_sequence = {
    .sq_length = (lenfunc)RowSpan_length,
    .sq_item = (ssizeargfunc)RowSpan_item,
};

static PyMappingMethods RowSpan_mapping = {
    .mp_length = (lenfunc)RowSpan_length,
    .mp_subscript = (binaryfunc)RowSpan_subscript,
};

static PyTypeObject RowSpanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.contract._envelope.RowSpan",
    .tp_basicsize = sizeof(RowSpan),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_SEQUENCE,
    .tp_doc = "A message's rows held in a RowStore (made by Decoder.decode_into)",
    .tp_dealloc = (destructor)RowSpan_dealloc,
    .tp_repr = (reprfunc)RowSpan_repr,
    .tp_as_sequence = &RowSpan_sequence,
    .tp_as_mapping = &RowSpan_mapping,
    .tp_getset = RowSpan_getset,
    .tp_methods = RowSpan_methods,
};

enum { F_SESSION, F_SEQ, F_TYPE, F_TS, F_ROWS, F_DELETED, F_COUNT };
static const char *const FIELDS[F_COUNT] = {"session", "seq", "type", "ts", "rows", "deleted"};
enum { SNAPSHOT, UPDATE, END };

/* The envelope of ``value``, or None; with a store, the rows go into it (see decode_into). */
static PyObject *decode(Decoder *d, PyObject *value, RowStore *store) {
    if (!PyBytes_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "decode takes bytes");
        return NULL;
    }
    Py_ssize_t first = store != NULL ? store->rows : 0;
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
            /* With a store, the rows go into it and the list holds their keys. */
            if (!array_of(d, &c, store != NULL ? row_into : row_of, store, &found[F_ROWS]))
                goto done;
            break;
        case F_DELETED:
            if (!array_of(d, &c, key_of, NULL, &found[F_DELETED]))
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
    PyObject *deleted_keys = type == UPDATE && deleted != NULL ? deleted : empty;
    PyObject *span = NULL;
    if (store != NULL && rows != NULL && PyList_GET_SIZE(rows) > 0) {
        span = span_of(store, first, rows);
        if (span == NULL)
            PyErr_Clear();
    }
    if (store == NULL || rows == NULL || PyList_GET_SIZE(rows) == 0 || span != NULL)
        result = Py_BuildValue("(OLiLOO)", found[F_SESSION], seq, type, ts,
                               span != NULL ? span : rows != NULL && store == NULL ? rows : empty,
                               deleted_keys);
    Py_XDECREF(span);
    Py_DECREF(empty);
    if (result == NULL)
        PyErr_Clear();
done:
    for (int i = 0; i < F_COUNT; i++)
        Py_XDECREF(found[i]);
    if (result == NULL) {
        if (store != NULL)
            truncate_to(store, first); /* none of a message it leaves stays */
        Py_RETURN_NONE;
    }
    return result;
}

/* decode(value) -> (session, seq, type, ts, rows, deleted) or None: see the top. */
static PyObject *Decoder_decode(Decoder *d, PyObject *value) {
    return decode(d, value, NULL);
}

/* decode_into(value, store) -> (session, seq, type, ts, rows, deleted) or None, rows a
 * RowSpan of the store (or () for none). */
static PyObject *Decoder_decode_into(Decoder *d, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !Py_IS_TYPE(args[1], &RowStoreType) ||
        ((RowStore *)args[1])->decoder != d) {
        PyErr_SetString(PyExc_TypeError, "decode_into takes a value and a RowStore of this decoder");
        return NULL;
    }
    return decode(d, args[0], (RowStore *)args[1]);
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
        column->plain = 1;
        for (Py_ssize_t at = 0; at < column->length; at++) {
            unsigned char ch = (unsigned char)column->name[at];
            if (ch == '"' || ch == '\\' || ch < 0x20)
                column->plain = 0;
        }
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
    {"decode_into", (PyCFunction)(void (*)(void))Decoder_decode_into, METH_FASTCALL,
     "decode_into(value, store) -> (session, seq, type, ts, rows, deleted), or None: the "
     "rows written into the store, given as a RowSpan of it (() for none)"},
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
    if (PyDateTimeAPI == NULL || PyType_Ready(&DecoderType) < 0 ||
        PyType_Ready(&RowStoreType) < 0 || PyType_Ready(&RowSpanType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (c_locale == (locale_t)0)
        c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); /* kept for the process */
    /* The interface's number, app/compiled.py's INTERFACE: a module built from older source
     * is left unused, not misread. */
    if (PyModule_AddIntConstant(m, "INTERFACE", 3) < 0 ||
        PyModule_AddObjectRef(m, "Decoder", (PyObject *)&DecoderType) < 0 ||
        PyModule_AddObjectRef(m, "RowStore", (PyObject *)&RowStoreType) < 0 ||
        PyModule_AddObjectRef(m, "RowSpan", (PyObject *)&RowSpanType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
