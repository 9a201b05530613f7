/*
 * What the job's two compiled parts share (app/contract/_envelope.c, the envelope's
 * decoder and its store of rows; app/engine/_columns.c, the output rows' converter):
 * the column types, and the Arrow forms both write. Included by each; `make setup`
 * rebuilds both when it changes.
 */
#ifndef TABLECAST_COMPILED_H
#define TABLECAST_COMPILED_H

#include <Python.h>

/* The column types, in app.contract.envelope's NATIVE_TYPES order. */
enum { T_STRING, T_INT64, T_FLOAT64, T_BOOL, T_TIMESTAMP, T_DATE, T_DECIMAL, T_COUNT };

/* Arrow's decimal128: a little-endian two's complement integer of 16 bytes. */
typedef __int128 int128;

/* Days from 1970-01-01 to a civil date (Howard Hinnant's days_from_civil): a date32, and
 * a timestamp's day. */
static inline long long days_from_civil(int year, int month, int day) {
    long long y = year - (month <= 2);
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long of_era = y - era * 400;
    long long of_year = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
    return era * 146097 + of_era * 365 + of_era / 4 - of_era / 100 + of_year - 719468;
}

/* The bytes of one value of a fixed-width column type; 0: strings and bools, sized apart. */
static inline Py_ssize_t fixed_width(int type) {
    switch (type) {
    case T_INT64:
    case T_FLOAT64:
    case T_TIMESTAMP:
        return 8;
    case T_DATE:
        return 4;
    case T_DECIMAL:
        return 16;
    default:
        return 0;
    }
}

#endif
