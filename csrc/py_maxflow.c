/* py_maxflow.c -- placeholder binding of fxcut_min_cut. */
#include "py_binding.h"
#include "maxflow.h"

const char fxcut_py_min_cut_doc[] = "min_cut(...): not built yet";

PyObject *fxcut_py_min_cut(PyObject *module, PyObject *args)
{
    (void)module; (void)args;
    PyErr_SetString(PyExc_NotImplementedError, "min_cut is not built yet");
    return NULL;
}
