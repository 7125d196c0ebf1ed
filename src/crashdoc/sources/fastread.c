/* crashdoc's batch reader of the journal (sources/fastread.py builds and loads it).
 *
 * systemd-python costs a Python call per field (`_next`, three `_get`, `_get_realtime`), and each
 * `sd_journal_get_data()` scans the entry's items from the start. This walks up to `limit` entries
 * in C and enumerates each entry's fields once. It follows the same contract, step for step, as
 * the systemd-python batch reader of sources/journal.py (`python_batch`), which is the reference:
 * a test reads one journal with both and compares. How an entry becomes a line is not decided
 * here: the line is `line_of(template, text, timestamp)` and a message that is not plain
 * printable ASCII is `text_of(bytes)`, both Python functions of sources/journal.py.
 *
 * It uses the sd_journal* of a systemd-python Reader (the struct's only member after the object
 * header; sources/fastread.py checks the layout before use). Entries Python must read with its
 * own rules end the batch with the reader positioned on them.
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

/* the message as text: plain printable ASCII as it is (what text_of returns for it), anything else
 * through text_of(the bytes, cut to max_bytes); new reference */
static PyObject *message_text(const char *raw, size_t n, long max_bytes, PyObject *text_of) {
    if (max_bytes >= 0 && n > (size_t)max_bytes) n = (size_t)max_bytes;
    size_t i = 0;
    while (i < n && (unsigned char)raw[i] >= 0x20 && (unsigned char)raw[i] < 0x7f) i++;
    if (i == n) return PyUnicode_DecodeASCII(raw, (Py_ssize_t)n, NULL);
    PyObject *bytes = PyBytes_FromStringAndSize(raw, (Py_ssize_t)n);
    if (bytes == NULL) return NULL;
    PyObject *text = PyObject_CallOneArg(text_of, bytes);
    Py_DECREF(bytes);
    return text;
}

/* Up to `limit` entries: returns (lines, status, stepped, errors).
 *
 * lines: line_of(processes[(unit bytes, pid bytes)], text, realtime in seconds) for each entry of
 * a known process. status: LIMIT, AT_END, STOPPED (the reader is on an entry Python reads itself:
 * no _SYSTEMD_UNIT, a unit that starts with one of `stop`, a process not in `processes` yet) or
 * -errno from sd_journal_next(). stepped: entries walked (the one stopped on included). errors:
 * damaged entries skipped. An entry without MESSAGE or _PID is stepped over. */
PyObject *crashdoc_read_batch(PyObject *reader, long limit, PyObject *stop, PyObject *processes, long max_bytes,
                              PyObject *line_of, PyObject *text_of) {
    sd_journal *j = ((SystemdReader *)reader)->j;
    if (!PyTuple_Check(stop) || !PyDict_Check(processes)) {
        PyErr_SetString(PyExc_TypeError, "fastread: stop is a tuple of bytes, processes a dict");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    long status = LIMIT, errors = 0, stepped = 0;
    Py_ssize_t nstop = PyTuple_GET_SIZE(stop);
    while (stepped < limit) {
        int r = sd_journal_next(j);
        if (r < 0) { status = r; break; }
        if (r == 0) { status = AT_END; break; }
        stepped++;
        /* a field's buffer is valid only until the next enumerate call (sd_journal_get_data(3)): kept at once */
        PyObject *unit = NULL, *pid = NULL, *text = NULL, *line = NULL;
        const void *data;
        size_t length;
        int found = 0, failed = 0, stop_here = 0;
        sd_journal_restart_data(j);
        while (found < NFIELDS && (r = sd_journal_enumerate_data(j, &data, &length)) > 0) {
            const char *d = data;
            if (unit == NULL && length >= fields[0].len && memcmp(d, fields[0].prefix, fields[0].len) == 0) {
                d += fields[0].len;
                size_t n_unit = length - fields[0].len;
                for (Py_ssize_t s = 0; s < nstop && !stop_here; s++) {
                    PyObject *p = PyTuple_GET_ITEM(stop, s);
                    size_t plen = PyBytes_Check(p) ? (size_t)PyBytes_GET_SIZE(p) : (size_t)-1;
                    stop_here = plen <= n_unit && memcmp(d, PyBytes_AS_STRING(p), plen) == 0;
                }
                if (stop_here) break;
                unit = PyBytes_FromStringAndSize(d, (Py_ssize_t)n_unit);
                failed = unit == NULL;
                found++;
            } else if (pid == NULL && length >= fields[1].len && memcmp(d, fields[1].prefix, fields[1].len) == 0) {
                pid = PyBytes_FromStringAndSize(d + fields[1].len, (Py_ssize_t)(length - fields[1].len));
                failed = pid == NULL;
                found++;
            } else if (text == NULL && length >= fields[2].len && memcmp(d, fields[2].prefix, fields[2].len) == 0) {
                text = message_text(d + fields[2].len, length - fields[2].len, max_bytes, text_of);
                failed = text == NULL;
                found++;
            }
            if (failed) break;
        }
        if (!failed && !stop_here) {
            if (r < 0) {
                errors++; /* a damaged entry: counted, skipped */
            } else if (unit == NULL) {
                stop_here = 1; /* no unit (kernel lines): Python decides */
            } else if (pid != NULL && text != NULL) {
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
                    PyObject *ts = PyFloat_FromDouble((double)usec / 1e6);
                    if (ts == NULL) {
                        failed = 1;
                    } else {
                        PyObject *args[3] = {process, text, ts};
                        line = PyObject_Vectorcall(line_of, args, 3, NULL);
                        Py_DECREF(ts);
                        failed = line == NULL || PyList_Append(out, line) < 0;
                    }
                }
            }
        }
        Py_XDECREF(unit); Py_XDECREF(pid); Py_XDECREF(text); Py_XDECREF(line);
        if (failed) {
            Py_DECREF(out);
            return NULL;
        }
        if (stop_here) { status = STOPPED; break; }
    }
    return Py_BuildValue("(Nlll)", out, status, stepped, errors);
}

/* sd_journal_get_data_threshold() of the reader's journal: Python compares it with Reader.data_threshold
 * (which systemd-python reads through its own pointer) before using this reader at all */
long crashdoc_reader_threshold(PyObject *reader) {
    size_t size = 0;
    if (sd_journal_get_data_threshold(((SystemdReader *)reader)->j, &size) < 0) return -1;
    return (long)size;
}
