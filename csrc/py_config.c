/*
 * py_config.c -- a config object's named fields, read into a C struct.
 *
 * The C readers (lower_read, cse_key, prepare_plan) take their settings as
 * one object with named attributes (a frozen dataclass on the Python side:
 * fxcut.route.lower.ReaderConfig, fxcut.torchrules.prepare.CseKeyConfig and
 * PlanConfig).  Each reader lists its fields in a table -- the attribute's
 * name, what it must be, where it goes in the reader's struct -- and this
 * file reads them all by name, so every reader reports a missing or
 * ill-typed field the same way, naming it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "py_binding.h"

static const char *kind_name(fxcut_field_kind kind)
{
    switch (kind) {
    case FXCUT_FIELD_OBJECT: return "an object";
    case FXCUT_FIELD_TYPE: return "a type";
    case FXCUT_FIELD_TUPLE: return "a tuple";
    case FXCUT_FIELD_DICT: return "a dict";
    case FXCUT_FIELD_FROZENSET: return "a frozenset";
    case FXCUT_FIELD_CALLABLE: return "callable";
    case FXCUT_FIELD_CALLABLE_OR_NONE: return "callable or None";
    case FXCUT_FIELD_BOOL: return "a bool";
    case FXCUT_FIELD_BITS: return "an int (a bit set)";
    }
    return "?";
}

/* 1 if `value` is what `kind` asks for, 0 if not. */
static int fits(fxcut_field_kind kind, PyObject *value)
{
    switch (kind) {
    case FXCUT_FIELD_OBJECT: return 1;
    case FXCUT_FIELD_TYPE: return PyType_Check(value);
    case FXCUT_FIELD_TUPLE: return PyTuple_Check(value);
    case FXCUT_FIELD_DICT: return PyDict_Check(value);
    case FXCUT_FIELD_FROZENSET: return PyFrozenSet_Check(value);
    case FXCUT_FIELD_CALLABLE: return PyCallable_Check(value);
    case FXCUT_FIELD_CALLABLE_OR_NONE: return value == Py_None || PyCallable_Check(value);
    case FXCUT_FIELD_BOOL: return PyBool_Check(value);
    case FXCUT_FIELD_BITS: return PyLong_Check(value) && !PyBool_Check(value);
    }
    return 0;
}

/* An int field's value, checked to fit 64 unsigned bits; -1 with a
 * ValueError naming the field. */
static int read_bits(PyObject *value, const char *what, const char *name, uint64_t *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        fxcut_raise_from_current(PyExc_ValueError, "%s: config field '%s' (%R) must be a bit set in [0, 2**64)",
                                 what, name, value);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* One field into the struct at `out`; -1 with a TypeError (or ValueError)
 * naming it. */
static int read_field(PyObject *config, const char *what, const fxcut_config_field *f, char *out)
{
    PyObject *value = PyObject_GetAttrString(config, f->name);
    if (value == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            fxcut_raise_from_current(PyExc_TypeError, "%s: config has no field '%s' (%s), got %.100s", what,
                                     f->name, kind_name(f->kind), Py_TYPE(config)->tp_name);
        }
        return -1;
    }
    if (!fits(f->kind, value)) {
        PyErr_Format(PyExc_TypeError, "%s: config field '%s' must be %s, got %.100s", what, f->name,
                     kind_name(f->kind), Py_TYPE(value)->tp_name);
        Py_DECREF(value);
        return -1;
    }
    int rc = 0;
    if (f->kind == FXCUT_FIELD_BOOL) {
        *(int *)(void *)(out + f->offset) = value == Py_True;
    } else if (f->kind == FXCUT_FIELD_BITS) {
        rc = read_bits(value, what, f->name, (uint64_t *)(void *)(out + f->offset));
    } else {
        *(PyObject **)(void *)(out + f->offset) = value; /* the struct owns it */
        return 0;
    }
    Py_DECREF(value);
    return rc;
}

int fxcut_read_config(PyObject *config, const char *what, const fxcut_config_field *fields, size_t count,
                      void *out)
{
    for (size_t k = 0; k < count; k++) {
        if (read_field(config, what, &fields[k], (char *)out) < 0) {
            return -1;
        }
    }
    return 0;
}

void fxcut_release_config(const fxcut_config_field *fields, size_t count, void *out)
{
    for (size_t k = 0; k < count; k++) {
        if (fields[k].kind != FXCUT_FIELD_BOOL && fields[k].kind != FXCUT_FIELD_BITS) {
            Py_CLEAR(*(PyObject **)(void *)((char *)out + fields[k].offset));
        }
    }
}
