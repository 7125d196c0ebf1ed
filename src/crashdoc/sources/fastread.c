/* crashdoc's batch reader for one-shot journal reads (`crashdoc diagnose`).
 *
 * systemd-python costs a Python call per field (`_next`, three `_get`, `_get_realtime`), and
 * each `sd_journal_get_data()` scans the entry's items from the start. This walks up to
 * `limit` entries in C and enumerates each entry's fields once, returning the few crashdoc
 * reads as a list of tuples. It is compiled on first use (gcc, Python's headers,
 * libsystemd-dev) into crashdoc's cache folder and loaded with ctypes.PyDLL; without a
 * compiler crashdoc reads with systemd-python as before (sources/journal.py).
 *
 * The lines come back as LogLine objects, built here through the dataclass's slot descriptors
 * (no Python __init__ per line); text with a byte outside printable ASCII goes through
 * str.isprintable() and, when that says so, terminal_safe(), as the Python reader does.
 *
 * It uses the sd_journal* of a systemd-python Reader (the struct's only member after the
 * object header; sources/fastread.py checks the layout before use). Entries Python must read
 * with its own rules end the batch with the reader positioned on them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <systemd/sd-journal.h>

typedef struct {
    PyObject_HEAD
    sd_journal *j;
} SystemdReader;

#define FIELD(name) {name "=", sizeof(name)}
static const struct { const char *prefix; size_t len; } fields[] = {
    FIELD("_SYSTEMD_UNIT"), FIELD("_PID"), FIELD("MESSAGE"),
};
#define NFIELDS 3

enum { LIMIT = 0, AT_END = 1, STOPPED = 2 };

/* LogLine's type, its six slot descriptors (unit, pid, text, timestamp, invocation, cmdline),
 * terminal_safe and "": set once by crashdoc_setup (sources/fastread.py checks the fields). */
static PyTypeObject *line_type = NULL;
static PyObject *slots[6];
static PyObject *safe = NULL, *empty = NULL;

int crashdoc_setup(PyObject *type, PyObject *descriptors, PyObject *terminal_safe, PyObject *blank) {
    if (!PyType_Check(type) || !PyTuple_Check(descriptors) || PyTuple_GET_SIZE(descriptors) != 6) return -1;
    for (int i = 0; i < 6; i++) {
        PyObject *d = PyTuple_GET_ITEM(descriptors, i);
        if (Py_TYPE(d)->tp_descr_set == NULL) return -1;
    }
    for (int i = 0; i < 6; i++) { Py_INCREF(PyTuple_GET_ITEM(descriptors, i)); slots[i] = PyTuple_GET_ITEM(descriptors, i); }
    Py_INCREF(type); line_type = (PyTypeObject *)type;
    Py_INCREF(terminal_safe); safe = terminal_safe;
    Py_INCREF(blank); empty = blank;
    return 0;
}

/* LogLine(process[0], process[1], text, timestamp, process[2], ""): steals nothing */
static PyObject *make_line(PyObject *process, PyObject *text, double timestamp) {
    if (!PyTuple_Check(process) || PyTuple_GET_SIZE(process) < 3) {
        PyErr_SetString(PyExc_TypeError, "fastread: a process is (unit, pid, invocation, ...)");
        return NULL;
    }
    PyObject *line = line_type->tp_alloc(line_type, 0);
    if (line == NULL) return NULL;
    PyObject *ts = PyFloat_FromDouble(timestamp);
    PyObject *values[6] = {PyTuple_GET_ITEM(process, 0), PyTuple_GET_ITEM(process, 1), text, ts,
                           PyTuple_GET_ITEM(process, 2), empty};
    int failed = ts == NULL;
    for (int i = 0; i < 6 && !failed; i++)
        failed = Py_TYPE(slots[i])->tp_descr_set(slots[i], line, values[i]) < 0;
    Py_XDECREF(ts);
    if (failed) { Py_DECREF(line); return NULL; }
    return line;
}

/* text as the Python reader keeps it: unchanged when printable, else terminal_safe(text); new reference */
static PyObject *kept_text(PyObject *text, const char *raw, size_t n) {
    size_t i = 0;
    while (i < n && (unsigned char)raw[i] >= 0x20 && (unsigned char)raw[i] < 0x7f) i++;
    if (i == n) { Py_INCREF(text); return text; } /* printable ASCII: the common case */
    PyObject *printable = PyObject_CallMethod(text, "isprintable", NULL);
    if (printable == NULL) return NULL;
    int is = PyObject_IsTrue(printable);
    Py_DECREF(printable);
    if (is < 0) return NULL;
    if (is) { Py_INCREF(text); return text; }
    return PyObject_CallOneArg(safe, text);
}

/* Up to `limit` lines of known processes: returns (lines, status, errors).
 *
 * lines: a list of LogLine: the unit, PID and run are those of the value of `processes` under
 * (unit bytes, pid bytes), the text the MESSAGE cut to `max_bytes`, decoded as UTF-8 (errors
 * replaced) and made terminal-safe, the timestamp the realtime in seconds. status: LIMIT, AT_END, STOPPED (the reader is on
 * an entry Python reads itself: no unit, a unit in `stop` (PID 1, core dumps), a process not in
 * `processes` yet) or -errno from sd_journal_next(). errors: damaged entries skipped. */
PyObject *crashdoc_read_batch(PyObject *reader, long limit, PyObject *stop, PyObject *processes, long max_bytes) {
    sd_journal *j = ((SystemdReader *)reader)->j;
    if (line_type == NULL) { PyErr_SetString(PyExc_RuntimeError, "fastread: crashdoc_setup not called"); return NULL; }
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    long status = LIMIT, errors = 0;
    Py_ssize_t nstop = PyTuple_GET_SIZE(stop);
    for (long n = 0; n < limit; n++) {
        int r = sd_journal_next(j);
        if (r < 0) { status = r; break; }
        if (r == 0) { status = AT_END; break; }
        /* a field's buffer is valid only until the next enumerate call (sd_journal_get_data(3)): kept at once */
        PyObject *unit = NULL, *pid = NULL, *text = NULL;
        const char *raw = NULL;
        size_t n_raw = 0;
        const void *data;
        size_t length;
        int found = 0, failed = 0, stop_here = 0;
        sd_journal_restart_data(j);
        while (found < NFIELDS && (r = sd_journal_enumerate_data(j, &data, &length)) > 0) {
            const char *d = data;
            if (unit == NULL && length >= fields[0].len && memcmp(d, fields[0].prefix, fields[0].len) == 0) {
                d += fields[0].len;
                size_t n_unit = length - fields[0].len;
                for (Py_ssize_t s = 0; s < nstop; s++) {
                    PyObject *p = PyTuple_GET_ITEM(stop, s);
                    size_t plen = (size_t)PyBytes_GET_SIZE(p);
                    if (plen <= n_unit && memcmp(d, PyBytes_AS_STRING(p), plen) == 0) stop_here = 1;
                }
                if (stop_here) break;
                unit = PyBytes_FromStringAndSize(d, n_unit);
                failed |= unit == NULL;
                found++;
            } else if (pid == NULL && length >= fields[1].len && memcmp(d, fields[1].prefix, fields[1].len) == 0) {
                pid = PyBytes_FromStringAndSize(d + fields[1].len, length - fields[1].len);
                failed |= pid == NULL;
                found++;
            } else if (text == NULL && length >= fields[2].len && memcmp(d, fields[2].prefix, fields[2].len) == 0) {
                size_t n_text = length - fields[2].len;
                if (max_bytes >= 0 && n_text > (size_t)max_bytes) n_text = (size_t)max_bytes;
                raw = d + fields[2].len;
                n_raw = n_text;
                text = PyUnicode_DecodeUTF8(raw, (Py_ssize_t)n_text, "replace");
                failed |= text == NULL;
                if (text != NULL) { /* checked now: `raw` is valid only until the next enumerate call */
                    PyObject *kept = kept_text(text, raw, n_raw);
                    Py_DECREF(text);
                    text = kept;
                    failed |= text == NULL;
                }
                found++;
            }
            if (failed) break;
        }
        PyObject *item = NULL;
        if (failed) {
            Py_XDECREF(unit); Py_XDECREF(pid); Py_XDECREF(text);
            Py_DECREF(out);
            return NULL;
        }
        if (!stop_here && r < 0) {
            errors++; /* a damaged entry: counted, skipped */
        } else if (stop_here || unit == NULL) {
            stop_here = 1; /* PID 1, a core dump, no unit (kernel lines): Python decides */
        } else if (pid != NULL && text != NULL) { /* without MESSAGE or _PID there is nothing to read */
            PyObject *key = PyTuple_Pack(2, unit, pid);
            PyObject *process = key != NULL ? PyDict_GetItemWithError(processes, key) : NULL;
            Py_XDECREF(key);
            uint64_t usec = 0;
            if (process == NULL) {
                if (PyErr_Occurred()) failed = 1;
                else stop_here = 1; /* a process's first line: Python reads who it is */
            } else if (sd_journal_get_realtime_usec(j, &usec) < 0) {
                errors++;
            } else {
                item = make_line(process, text, (double)usec / 1e6);
                failed |= item == NULL;
            }
        }
        Py_XDECREF(unit); Py_XDECREF(pid); Py_XDECREF(text);
        if (failed || (item != NULL && PyList_Append(out, item) < 0)) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_XDECREF(item);
        if (stop_here) { status = STOPPED; break; }
    }
    return Py_BuildValue("(Nll)", out, status, errors);
}

/* sd_journal_get_data_threshold() of the reader's journal: Python compares it with Reader.data_threshold
 * (which systemd-python reads through its own pointer) before using this reader at all */
long crashdoc_reader_threshold(PyObject *reader) {
    size_t size = 0;
    if (sd_journal_get_data_threshold(((SystemdReader *)reader)->j, &size) < 0) return -1;
    return (long)size;
}
