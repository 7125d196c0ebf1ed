/* crashdoc's reader of a unit's D-Bus properties (sources/busread.py builds and loads it).
 *
 * pystemd keeps the GIL while it waits for PID 1's answer, and a PID 1 busy restarting twenty looping units
 * answers late: every thread of the daemon (the HTTP server's /metrics included) stalled for as long. Here
 * the GetAll calls run with the GIL released; only the conversion of the replies holds it. The values are
 * pystemd's types where units.py reads them (strings, object paths and signatures as bytes, integers,
 * booleans, doubles; arrays as lists, structs as tuples, dictionaries as dicts), except that `ay` is bytes
 * (pystemd: a list of ints; units.py takes both).
 *
 * The connection is this module's own (sd_bus_open_system, as pystemd's DBus() opens it) and is used by one
 * thread at a time: sd-bus is not thread-safe, and the GIL no longer serializes its users.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <string.h>
#include <systemd/sd-bus.h>

/* A Python exception for a negative sd-bus return; NULL. */
static PyObject *errno_error(int r, const char *what) {
    PyObject *args = Py_BuildValue("(is)", -r, what);
    if (args != NULL) {
        PyErr_SetObject(PyExc_OSError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static PyObject *failed(int r) { return errno_error(r, strerror(-r)); }

/* Open the system bus: 0 and *out set, or -errno. */
int crashdoc_bus_open(sd_bus **out) {
    *out = NULL;
    return sd_bus_open_system(out);
}

void crashdoc_bus_close(sd_bus *bus) {
    if (bus != NULL) sd_bus_flush_close_unref(bus);
}

static PyObject *value(sd_bus_message *m, char type, const char *contents);

/* The next complete value in the current container (new reference); NULL with an exception. */
static PyObject *next_value(sd_bus_message *m) {
    char type;
    const char *contents;
    int r = sd_bus_message_peek_type(m, &type, &contents);
    if (r < 0) return failed(r);
    if (r == 0) return errno_error(EBADMSG, "the D-Bus reply ends before a value");
    return value(m, type, contents);
}

static PyObject *basic(sd_bus_message *m, char type) {
    union {
        uint8_t y;
        int b;
        int16_t n;
        uint16_t q;
        int32_t i;
        uint32_t u;
        int64_t x;
        uint64_t t;
        double d;
        const char *s;
    } v;
    int r = sd_bus_message_read_basic(m, type, &v);
    if (r < 0) return failed(r);
    switch (type) {
    case 'y': return PyLong_FromLong(v.y);
    case 'b': return PyBool_FromLong(v.b);
    case 'n': return PyLong_FromLong(v.n);
    case 'q': return PyLong_FromLong(v.q);
    case 'i': return PyLong_FromLong(v.i);
    case 'h': return PyLong_FromLong(v.i);
    case 'u': return PyLong_FromUnsignedLong(v.u);
    case 'x': return PyLong_FromLongLong(v.x);
    case 't': return PyLong_FromUnsignedLongLong(v.t);
    case 'd': return PyFloat_FromDouble(v.d);
    case 's':
    case 'o':
    case 'g': return PyBytes_FromString(v.s);
    }
    return errno_error(EBADMSG, "a D-Bus type busread.c does not know");
}

/* A dict entry's key and value into `out`. */
static int dict_entry(sd_bus_message *m, const char *contents, PyObject *out) {
    int r = sd_bus_message_enter_container(m, SD_BUS_TYPE_DICT_ENTRY, contents);
    if (r < 0) return failed(r), -1;
    PyObject *key = next_value(m);
    PyObject *val = key != NULL ? next_value(m) : NULL;
    int ok = val != NULL ? PyDict_SetItem(out, key, val) : -1;
    Py_XDECREF(key);
    Py_XDECREF(val);
    if (ok < 0) return -1;
    r = sd_bus_message_exit_container(m);
    return r < 0 ? (failed(r), -1) : 0;
}

static PyObject *container(sd_bus_message *m, char type, const char *contents) {
    int r = sd_bus_message_enter_container(m, type, contents);
    if (r < 0) return failed(r);
    int is_dict = type == SD_BUS_TYPE_ARRAY && contents[0] == '{';
    PyObject *out = is_dict ? PyDict_New() : PyList_New(0);
    while (out != NULL) {
        char t;
        const char *c;
        r = sd_bus_message_peek_type(m, &t, &c);
        if (r <= 0) break;
        if (is_dict) {
            if (dict_entry(m, c, out) < 0) Py_CLEAR(out);
            continue;
        }
        PyObject *item = value(m, t, c);
        if (item == NULL || PyList_Append(out, item) < 0) Py_CLEAR(out);
        Py_XDECREF(item);
    }
    if (out == NULL) return NULL;
    if (r < 0) return Py_DECREF(out), failed(r);
    r = sd_bus_message_exit_container(m);
    if (r < 0) return Py_DECREF(out), failed(r);
    if (type == SD_BUS_TYPE_STRUCT) {
        PyObject *tuple = PyList_AsTuple(out);
        Py_DECREF(out);
        return tuple;
    }
    if (type == SD_BUS_TYPE_VARIANT) {  /* a variant is its one value */
        PyObject *inner = PyList_GET_SIZE(out) == 1 ? PyList_GET_ITEM(out, 0) : Py_None;
        Py_INCREF(inner);
        Py_DECREF(out);
        return inner;
    }
    return out;
}

static PyObject *value(sd_bus_message *m, char type, const char *contents) {
    if (type == SD_BUS_TYPE_ARRAY && strcmp(contents, "y") == 0) {
        const void *data;
        size_t size;
        int r = sd_bus_message_read_array(m, 'y', &data, &size);
        if (r < 0) return failed(r);
        return PyBytes_FromStringAndSize(data, (Py_ssize_t)size);
    }
    if (type == SD_BUS_TYPE_ARRAY || type == SD_BUS_TYPE_STRUCT || type == SD_BUS_TYPE_VARIANT)
        return container(m, type, contents);
    return basic(m, type);
}

/* GetAll's a{sv} as {name bytes: value}, only the names in `wanted` (a set of bytes; None: all). */
static PyObject *properties(sd_bus_message *m, PyObject *wanted) {
    int r = sd_bus_message_enter_container(m, SD_BUS_TYPE_ARRAY, "{sv}");
    if (r < 0) return failed(r);
    PyObject *out = PyDict_New();
    while (out != NULL && (r = sd_bus_message_enter_container(m, SD_BUS_TYPE_DICT_ENTRY, "sv")) > 0) {
        const char *name;
        r = sd_bus_message_read_basic(m, 's', &name);
        if (r < 0) break;
        PyObject *key = PyBytes_FromString(name);
        int keep = key == NULL ? -1 : wanted == Py_None ? 1 : PySet_Contains(wanted, key);
        PyObject *val = NULL;
        if (keep == 1) {
            val = next_value(m);
            if (val == NULL || PyDict_SetItem(out, key, val) < 0) keep = -1;
        } else if (keep == 0 && (r = sd_bus_message_skip(m, "v")) < 0) {
            Py_XDECREF(key);
            break;
        }
        Py_XDECREF(key);
        Py_XDECREF(val);
        if (keep < 0) Py_CLEAR(out);
        else if ((r = sd_bus_message_exit_container(m)) < 0) break;
    }
    if (out == NULL) return NULL;
    if (r < 0) return Py_DECREF(out), failed(r);
    r = sd_bus_message_exit_container(m);
    if (r < 0) return Py_DECREF(out), failed(r);
    return out;
}

/* An OSError for a D-Bus error (its text starts with the error's name, org.freedesktop.systemd1.NoSuchUnit: ...,
 * as pystemd's does) or for -errno; new reference. */
static PyObject *error_of(int r, const sd_bus_error *error) {
    PyObject *text = error != NULL && sd_bus_error_is_set(error)
                         ? PyUnicode_FromFormat("%s: %s", error->name, error->message ? error->message : "")
                         : PyUnicode_FromString(strerror(-r));
    if (text == NULL) return NULL;
    return PyObject_CallFunction(PyExc_OSError, "iN", -r, text);
}

typedef struct {
    sd_bus_message *reply;
    int done;
} Pending;

static int on_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
    (void)ret_error;
    Pending *p = userdata;
    p->reply = sd_bus_message_ref(m);
    p->done = 1;
    return 1;
}

/* GetAll for each (path, interface) of `calls` (a tuple of pairs of bytes), all sent at once and their replies
 * awaited together, without the GIL: one round trip to PID 1 instead of one per call. A tuple with, for each
 * call, {name bytes: value} (only the names in `wanted`, a set of bytes, or all with None) or the OSError of
 * its D-Bus error. A lost connection raises OSError. */
PyObject *crashdoc_bus_get_all(sd_bus *bus, PyObject *calls, PyObject *wanted) {
    if (!PyTuple_Check(calls) || (wanted != Py_None && !PyAnySet_Check(wanted))) {
        PyErr_SetString(PyExc_TypeError, "busread: calls is a tuple of (path, interface) bytes, wanted a set");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(calls);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *call = PyTuple_GET_ITEM(calls, k);
        if (!PyTuple_Check(call) || PyTuple_GET_SIZE(call) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(call, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(call, 1))) {
            PyErr_SetString(PyExc_TypeError, "busread: a call is a (path, interface) pair of bytes");
            return NULL;
        }
    }
    Pending *pending = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Pending));
    sd_bus_slot **slots = PyMem_Calloc(n ? (size_t)n : 1, sizeof(sd_bus_slot *));
    if (pending == NULL || slots == NULL) {
        PyMem_Free(pending);
        PyMem_Free(slots);
        return PyErr_NoMemory();
    }
    int r = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n && r >= 0; k++) {
        PyObject *call = PyTuple_GET_ITEM(calls, k); /* immutable bytes: safe to read without the GIL */
        r = sd_bus_call_method_async(bus, &slots[k], "org.freedesktop.systemd1",
                                     PyBytes_AS_STRING(PyTuple_GET_ITEM(call, 0)), "org.freedesktop.DBus.Properties",
                                     "GetAll", on_reply, &pending[k], "s", PyBytes_AS_STRING(PyTuple_GET_ITEM(call, 1)));
    }
    for (Py_ssize_t k = 0; k < n && r >= 0;) {
        if (pending[k].done) {
            k++;
            continue;
        }
        r = sd_bus_process(bus, NULL);
        if (r == 0) r = sd_bus_wait(bus, UINT64_MAX); /* sd-bus answers a call PID 1 never answers (25 s) */
    }
    Py_END_ALLOW_THREADS
    PyObject *out = r < 0 ? failed(r) : PyTuple_New(n);
    for (Py_ssize_t k = 0; k < n && out != NULL; k++) {
        const sd_bus_error *error = sd_bus_message_get_error(pending[k].reply);
        PyObject *got = error != NULL ? error_of(-sd_bus_error_get_errno(error), error)
                                      : properties(pending[k].reply, wanted);
        if (got == NULL) Py_CLEAR(out);
        else PyTuple_SET_ITEM(out, k, got);
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        sd_bus_slot_unref(slots[k]); /* a call still pending (the connection lost) is cancelled */
        sd_bus_message_unref(pending[k].reply);
    }
    PyMem_Free(pending);
    PyMem_Free(slots);
    return out;
}
