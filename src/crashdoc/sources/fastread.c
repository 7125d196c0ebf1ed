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

/* ---- reading ahead: the next batch walked in a thread while Python handles this one ----------------------
 *
 * `diagnose` reads the journal and runs the engine one after the other: on two CPUs the walk (libsystemd,
 * no Python object) can go on beside the engine. crashdoc_read_ahead() returns the batch the worker thread
 * walked since the last call (or walks one now) and, when that batch ended on its limit, hands the worker the
 * next before building this one's lines. The worker touches the sd_journal and its own buffers only, never a
 * Python object: it checks each entry's process against a copy of `processes` taken when the walk started,
 * keeps the raw messages, and keeps whole what Python reads with its own rules (a process's first line: its
 * unit, PID, invocation and command line; PID 1's records, core dumps, kernel lines: every field). The lines
 * are built with the GIL, by line_of and text_of as crashdoc_read_batch builds them, and the entries kept whole
 * by Python (ReadAhead.first_line, ReadAhead.other_entry), in order. A record of PID 1's may make Python forget
 * processes: after one, the walk (and the next one) reads each process's next line as a first line, which
 * Python reads with the template it has, or makes a new one. A walk stops where Python must read the journal
 * itself (a record of PID 1's about a unit not matched yet: Python matches it from there on). While a walk
 * runs nobody else may use the sd_journal: sources/fastread.py's ReadAhead waits for it first. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define MAX_STOP 8

typedef struct {
    const char *unit, *pid; size_t nunit, npid;
    Py_ssize_t template; /* index in `known`, or -1 - n: the n-th process this walk found (`fresh`) */
} Key;

/* a line; or (first >= 0) a process's first line, its fields at these offsets of the arena (-1: absent) */
typedef struct {
    Py_ssize_t key; size_t off, len; uint64_t usec;
    long first, unit, nunit, pid, npid, invocation, ninvocation, cmdline, ncmdline;
} Raw;

#define MAX_FRESH 1024 /* processes one walk may find before it stops on the next (and Python reads it) */

typedef struct {
    /* what the walk was asked */
    sd_journal *j;
    long limit, max_bytes;
    int nstop; char *stop[MAX_STOP]; size_t nstop_len[MAX_STOP];
    Key *keys; size_t nslots; /* open addressing, nslots a power of two (0: no process known) */
    PyObject *known; /* the (unit, pid) tuples and templates the keys point into, kept alive: a list */
    char *fresh_keys[MAX_FRESH]; PyObject *fresh[MAX_FRESH]; int nfresh; /* processes found by the walk */
    char **names; size_t *nnames; Py_ssize_t nname; /* the units the reader matches (ReadAhead.names) */
    /* what it found */
    Raw *raw; size_t nraw, raw_cap;
    char *arena; size_t used, arena_cap;
    long status, stepped, errors;
    int oom, forgot; /* forgot: it kept a record of PID 1's, which may make Python forget processes */
} Walk;

typedef struct {
    Walk walk[2];
    int next; /* the walk a thread fills, or filled */
    int running; /* the worker walks walk[next], or has and was not waited for */
    /* one worker thread for every walk (a thread started per batch waited for a CPU behind the engine) */
    pthread_t thread; int started, quit;
    PyObject *names, *other_of; /* ReadAhead.names, ReadAhead.other_entry (crashdoc_ahead_set) */
    pthread_mutex_t lock; pthread_cond_t wake, done;
    Walk *job; /* the walk the worker is to do or does; NULL once done */
    char *cursor; uint64_t usec; int has_position; /* where the reader was when the running walk started */
    int placed; /* the running walk started on no entry (the reader just placed: at the head, at a time) */
} Ahead;

static uint64_t key_hash(const char *unit, size_t nunit, const char *pid, size_t npid) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < nunit; i++) h = (h ^ (unsigned char)unit[i]) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;
    for (size_t i = 0; i < npid; i++) h = (h ^ (unsigned char)pid[i]) * 1099511628211ULL;
    return h;
}

#define NOT_FOUND PY_SSIZE_T_MIN

static Py_ssize_t key_find(const Walk *w, const char *unit, size_t nunit, const char *pid, size_t npid) {
    if (w->nslots == 0) return NOT_FOUND;
    size_t mask = w->nslots - 1;
    for (size_t s = key_hash(unit, nunit, pid, npid) & mask;; s = (s + 1) & mask) {
        const Key *k = &w->keys[s];
        if (k->unit == NULL) return NOT_FOUND;
        if (k->nunit == nunit && k->npid == npid && memcmp(k->unit, unit, nunit) == 0 && memcmp(k->pid, pid, npid) == 0)
            return k->template;
    }
}

static void walk_clear(Walk *w) {
    for (int i = 0; i < w->nfresh; i++) { free(w->fresh_keys[i]); Py_CLEAR(w->fresh[i]); }
    w->nfresh = 0;
    for (Py_ssize_t i = 0; i < w->nname; i++) free(w->names[i]);
    free(w->names); free(w->nnames); w->names = NULL; w->nnames = NULL; w->nname = 0;
    for (int s = 0; s < w->nstop; s++) free(w->stop[s]);
    w->nstop = 0;
    free(w->keys); w->keys = NULL; w->nslots = 0;
    Py_CLEAR(w->known);
    w->nraw = w->used = 0;
    w->status = LIMIT; w->stepped = w->errors = 0; w->oom = w->forgot = 0;
}

/* with the GIL: the walk's request and its copy of `processes` (returns -1 with an exception set) */
static int walk_setup(Walk *w, sd_journal *j, long limit, PyObject *stop, PyObject *processes, long max_bytes) {
    walk_clear(w);
    w->j = j; w->limit = limit; w->max_bytes = max_bytes;
    if (!PyTuple_Check(stop) || !PyDict_Check(processes) || PyTuple_GET_SIZE(stop) > MAX_STOP) {
        PyErr_SetString(PyExc_TypeError, "fastread: stop is a tuple of at most 8 bytes, processes a dict");
        return -1;
    }
    for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(stop); s++) {
        PyObject *p = PyTuple_GET_ITEM(stop, s);
        if (!PyBytes_Check(p)) { PyErr_SetString(PyExc_TypeError, "fastread: stop holds bytes"); return -1; }
        w->nstop_len[s] = (size_t)PyBytes_GET_SIZE(p);
        w->stop[s] = malloc(w->nstop_len[s] + 1);
        if (w->stop[s] == NULL) { PyErr_NoMemory(); return -1; }
        memcpy(w->stop[s], PyBytes_AS_STRING(p), w->nstop_len[s]);
        w->nstop = (int)s + 1;
    }
    Py_ssize_t n = PyDict_GET_SIZE(processes);
    w->known = PyList_New(0);
    if (w->known == NULL) return -1;
    size_t slots = 16;
    while (slots < ((size_t)n + MAX_FRESH) * 2) slots <<= 1;
    w->keys = calloc(slots, sizeof(Key));
    if (w->keys == NULL) { PyErr_NoMemory(); return -1; }
    w->nslots = slots;
    PyObject *key, *template;
    Py_ssize_t pos = 0;
    while (PyDict_Next(processes, &pos, &key, &template)) {
        PyObject *u, *p;
        if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 2 || !PyBytes_Check(u = PyTuple_GET_ITEM(key, 0))
            || !PyBytes_Check(p = PyTuple_GET_ITEM(key, 1))) {
            PyErr_SetString(PyExc_TypeError, "fastread: processes are keyed by (unit bytes, pid bytes)");
            return -1;
        }
        Py_ssize_t index = PyList_GET_SIZE(w->known);
        if (PyList_Append(w->known, template) < 0 || PyList_Append(w->known, key) < 0) return -1;
        size_t nu = (size_t)PyBytes_GET_SIZE(u), np = (size_t)PyBytes_GET_SIZE(p);
        size_t mask = slots - 1, s = key_hash(PyBytes_AS_STRING(u), nu, PyBytes_AS_STRING(p), np) & mask;
        while (w->keys[s].unit != NULL) s = (s + 1) & mask;
        w->keys[s] = (Key){PyBytes_AS_STRING(u), PyBytes_AS_STRING(p), nu, np, index};
    }
    return 0;
}

/* without the GIL: a process the walk found, remembered so that its next lines are lines (NOT_FOUND: no room) */
static Py_ssize_t key_add(Walk *w, const char *unit, size_t nunit, const char *pid, size_t npid) {
    if (w->nfresh == MAX_FRESH) return NOT_FOUND;
    char *copy = malloc(nunit + npid + 1);
    if (copy == NULL) return NOT_FOUND;
    memcpy(copy, unit, nunit);
    memcpy(copy + nunit, pid, npid);
    size_t mask = w->nslots - 1, s = key_hash(unit, nunit, pid, npid) & mask;
    while (w->keys[s].unit != NULL) s = (s + 1) & mask;
    Py_ssize_t template = -1 - w->nfresh;
    w->keys[s] = (Key){copy, copy + nunit, nunit, npid, template};
    w->fresh_keys[w->nfresh++] = copy;
    return template;
}

static int arena_put(Walk *w, const char *d, size_t n, size_t *off) {
    if (w->used + n > w->arena_cap) {
        size_t cap = w->arena_cap ? w->arena_cap : 1 << 16;
        while (cap < w->used + n) cap *= 2;
        char *a = realloc(w->arena, cap);
        if (a == NULL) return -1;
        w->arena = a; w->arena_cap = cap;
    }
    memcpy(w->arena + w->used, d, n);
    *off = w->used;
    w->used += n;
    return 0;
}

/* without the GIL: crashdoc_read_batch's walk, keeping raw messages and what Python reads with its own rules */
static int raw_add(Walk *w, const Raw *raw) {
    if (w->nraw == w->raw_cap) {
        size_t cap = w->raw_cap ? w->raw_cap * 2 : 512;
        Raw *more = realloc(w->raw, cap * sizeof(Raw));
        if (more == NULL) return -1;
        w->raw = more; w->raw_cap = cap;
    }
    w->raw[w->nraw++] = *raw;
    return 0;
}

/* without the GIL, on a process's first line: its unit, PID, invocation and command line into the arena
 * (-1: no memory, or the entry cannot be read again) */
static int walk_first(Walk *w, Raw *first, const char *unit, size_t nunit, const char *pid, size_t npid) {
    static const struct { const char *prefix; size_t len; } more[] = {
        FIELD("_SYSTEMD_INVOCATION_ID"), FIELD("_CMDLINE"),
    };
    size_t off;
    if (arena_put(w, unit, nunit, &off) < 0) return -1;
    first->unit = (long)off; first->nunit = (long)nunit;
    if (arena_put(w, pid, npid, &off) < 0) return -1;
    first->pid = (long)off; first->npid = (long)npid;
    first->invocation = first->cmdline = -1;
    first->ninvocation = first->ncmdline = 0;
    const void *data;
    size_t length;
    int r = 0;
    sd_journal_restart_data(w->j);
    while ((first->invocation < 0 || first->cmdline < 0) && (r = sd_journal_enumerate_data(w->j, &data, &length)) > 0) {
        for (int f = 0; f < 2; f++) {
            long *at = f == 0 ? &first->invocation : &first->cmdline;
            long *n = f == 0 ? &first->ninvocation : &first->ncmdline;
            if (*at < 0 && length >= more[f].len && memcmp(data, more[f].prefix, more[f].len) == 0) {
                if (arena_put(w, (const char *)data + more[f].len, length - more[f].len, &off) < 0) return -1;
                *at = (long)off; *n = (long)(length - more[f].len);
            }
        }
    }
    first->first = 1;
    return r < 0 ? -1 : 0;
}

/* with the GIL: the names the reader matches, for walk_other (-1: an exception set) */
static int walk_names(Walk *w, PyObject *names) {
    if (names == NULL || !PyTuple_Check(names)) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    w->names = calloc((size_t)n + 1, sizeof(char *));
    w->nnames = calloc((size_t)n + 1, sizeof(size_t));
    if (w->names == NULL || w->nnames == NULL) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyTuple_GET_ITEM(names, i);
        if (!PyBytes_Check(b)) { PyErr_SetString(PyExc_TypeError, "fastread: names are bytes"); return -1; }
        w->nnames[i] = (size_t)PyBytes_GET_SIZE(b);
        if ((w->names[i] = malloc(w->nnames[i] + 1)) == NULL) { PyErr_NoMemory(); return -1; }
        memcpy(w->names[i], PyBytes_AS_STRING(b), w->nnames[i]);
        w->nname = i + 1;
    }
    return 0;
}

/* without the GIL, on an entry Python reads with its own rules (PID 1's, a core dump, a kernel line): every
 * field into the arena ([4-byte length][NAME=value] each), for Python to read after the walk. -1: the walk
 * stops on it instead (no memory, a damaged entry, or a UNIT= the reader does not match: a unit new to the
 * journal, which Python matches from there on) */
static int walk_other(Walk *w, Raw *other) {
    const void *data;
    size_t length, off;
    int r;
    other->off = w->used;
    sd_journal_restart_data(w->j);
    while ((r = sd_journal_enumerate_data(w->j, &data, &length)) > 0) {
        if (length >= 5 && memcmp(data, "UNIT=", 5) == 0) {
            int known = 0;
            for (Py_ssize_t i = 0; i < w->nname && !known; i++)
                known = w->nnames[i] == length - 5 && memcmp((const char *)data + 5, w->names[i], length - 5) == 0;
            if (!known) return -1;
        }
        uint32_t n = (uint32_t)length;
        if (arena_put(w, (const char *)&n, sizeof n, &off) < 0 || arena_put(w, data, length, &off) < 0) return -1;
    }
    other->len = w->used - other->off;
    other->first = 2;
    return r < 0 ? -1 : 0;
}

#define ARENA_MAX (8 << 20) /* a walk ends once it holds this many bytes of messages (a flood of 16K lines) */

static void walk_run(Walk *w) {
    sd_journal *j = w->j;
    while (w->stepped < w->limit && w->used < ARENA_MAX) {
        int r = sd_journal_next(j);
        if (r < 0) { w->status = r; return; }
        if (r == 0) { w->status = AT_END; return; }
        w->stepped++;
        const void *data;
        size_t length, mark = w->used, msg_off = 0, msg_len = 0, n_unit = 0, n_pid = 0;
        char unit[512], pid[32];
        int has_unit = 0, has_pid = 0, has_msg = 0, found = 0, stop_here = 0, long_key = 0;
        sd_journal_restart_data(j);
        while (found < NFIELDS && (r = sd_journal_enumerate_data(j, &data, &length)) > 0) {
            const char *d = data;
            if (!has_unit && length >= fields[0].len && memcmp(d, fields[0].prefix, fields[0].len) == 0) {
                d += fields[0].len;
                n_unit = length - fields[0].len;
                for (int s = 0; s < w->nstop && !stop_here; s++)
                    stop_here = w->nstop_len[s] <= n_unit && memcmp(d, w->stop[s], w->nstop_len[s]) == 0;
                if (stop_here) break;
                if (n_unit <= sizeof(unit)) memcpy(unit, d, n_unit); else long_key = 1;
                has_unit = 1; found++;
            } else if (!has_pid && length >= fields[1].len && memcmp(d, fields[1].prefix, fields[1].len) == 0) {
                n_pid = length - fields[1].len;
                if (n_pid <= sizeof(pid)) memcpy(pid, d + fields[1].len, n_pid); else long_key = 1;
                has_pid = 1; found++;
            } else if (!has_msg && length >= fields[2].len && memcmp(d, fields[2].prefix, fields[2].len) == 0) {
                msg_len = length - fields[2].len;
                if (w->max_bytes >= 0 && msg_len > (size_t)w->max_bytes) msg_len = (size_t)w->max_bytes;
                if (arena_put(w, d + fields[2].len, msg_len, &msg_off) < 0) { w->oom = 1; return; }
                has_msg = 1; found++;
            }
        }
        if (stop_here || (r >= 0 && !has_unit)) { /* PID 1, a core dump, no unit (kernel lines): kept whole */
            w->used = mark;
            Raw other = {.first = -1};
            uint64_t usec = 0;
            if (w->nname == 0 || walk_other(w, &other) < 0 || sd_journal_get_realtime_usec(j, &usec) < 0
                || raw_add(w, &other) < 0) {
                w->used = mark; w->status = STOPPED; return; /* Python reads it itself */
            }
            w->raw[w->nraw - 1].usec = usec;
            if (stop_here && w->nslots) memset(w->keys, 0, w->nslots * sizeof(Key)); /* PID 1 may forget PIDs */
            w->forgot |= stop_here;
            continue;
        }
        if (r < 0) { w->used = mark; w->errors++; continue; } /* a damaged entry: counted, skipped */
        if (long_key) { w->used = mark; w->status = STOPPED; return; } /* Python decides */
        if (!has_pid || !has_msg) { w->used = mark; continue; }
        Py_ssize_t key = key_find(w, unit, n_unit, pid, n_pid);
        Raw first = {.first = -1};
        if (key == NOT_FOUND) { /* a process's first line: what Python reads of it is kept, the walk goes on */
            if (w->nfresh == MAX_FRESH || walk_first(w, &first, unit, n_unit, pid, n_pid) < 0
                || (key = key_add(w, unit, n_unit, pid, n_pid)) == NOT_FOUND) {
                w->used = mark; w->status = STOPPED; return; /* Python reads it itself */
            }
        }
        uint64_t usec = 0;
        if (sd_journal_get_realtime_usec(j, &usec) < 0) { w->used = mark; w->errors++; continue; }
        first.key = key; first.off = msg_off; first.len = msg_len; first.usec = usec;
        if (raw_add(w, &first) < 0) { w->oom = 1; return; }
    }
    w->status = LIMIT;
}

static void *walk_worker(void *arg) {
    Ahead *a = arg;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        while (a->job == NULL && !a->quit) pthread_cond_wait(&a->wake, &a->lock);
        if (a->quit) break;
        Walk *w = a->job;
        pthread_mutex_unlock(&a->lock);
        walk_run(w);
        pthread_mutex_lock(&a->lock);
        a->job = NULL;
        pthread_cond_signal(&a->done);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

void *crashdoc_ahead_new(void) {
    Ahead *a = calloc(1, sizeof(Ahead));
    if (a == NULL) return NULL;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->wake, NULL);
    pthread_cond_init(&a->done, NULL);
    return a;
}

/* what walks need of Python beyond a batch's arguments: the names the reader matches (a tuple of bytes) and
 * other_entry({field: bytes}, realtime usec) -> [events] for the entries Python reads with its own rules */
PyObject *crashdoc_ahead_set(void *state, PyObject *names, PyObject *other_of) {
    Ahead *a = state;
    Py_INCREF(names); Py_XSETREF(a->names, names);
    Py_INCREF(other_of); Py_XSETREF(a->other_of, other_of);
    Py_RETURN_NONE;
}

/* hand the worker a walk (started on first use); 0, or -1 when no thread can start */
static int worker_walk(Ahead *a, Walk *w) {
    if (!a->started) {
        if (pthread_create(&a->thread, NULL, walk_worker, a) != 0) return -1;
        a->started = 1;
    }
    pthread_mutex_lock(&a->lock);
    a->job = w;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    return 0;
}

/* without a thread running: forget where it started */
static void ahead_forget_position(Ahead *a) {
    free(a->cursor); a->cursor = NULL; a->has_position = 0; a->placed = 0;
}

/* wait for the running walk, if any; 1 when a walk was waited for (its batch not handed out yet) */
int crashdoc_ahead_join(void *state) {
    Ahead *a = state;
    if (!a->running) return 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&a->lock);
    while (a->job != NULL) pthread_cond_wait(&a->done, &a->lock);
    pthread_mutex_unlock(&a->lock);
    Py_END_ALLOW_THREADS
    a->running = 0;
    return 1;
}

/* wait until the running walk, if any, has walked its batch, which stays for the next read: the reader may then be
 * asked what does not move it (the journal's ends) without dropping the walk and placing the reader again */
void crashdoc_ahead_wait(void *state) {
    Ahead *a = state;
    if (!a->running) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&a->lock);
    while (a->job != NULL) pthread_cond_wait(&a->done, &a->lock);
    pthread_mutex_unlock(&a->lock);
    Py_END_ALLOW_THREADS
}

/* 1 while the worker walks (its batch not walked yet): the caller's work meanwhile waits for nothing */
int crashdoc_ahead_walking(void *state) {
    Ahead *a = state;
    if (!a->running) return 0;
    pthread_mutex_lock(&a->lock); /* the worker holds it only between two walks */
    int walking = a->job != NULL;
    pthread_mutex_unlock(&a->lock);
    return walking;
}

/* where the reader was when the running walk started: (cursor, realtime usec) of the last entry handed out,
 * or None when no walk runs (the reader itself says) */
PyObject *crashdoc_ahead_position(void *state) {
    Ahead *a = state;
    if (!a->running || !a->has_position) Py_RETURN_NONE;
    return Py_BuildValue("(sK)", a->cursor ? a->cursor : "", (unsigned long long)a->usec);
}

/* drop the walked batch that was not handed out (the reader is to be placed again): joins first; returns the
 * cursor of the last entry handed out (to seek back to), "" when the walk started on no entry (place the reader
 * again as it was placed), or None */
PyObject *crashdoc_ahead_drop(void *state) {
    Ahead *a = state;
    int waited = crashdoc_ahead_join(a);
    PyObject *out = waited && a->placed   ? PyUnicode_FromString("")
                    : waited && a->cursor ? PyUnicode_FromString(a->cursor)
                                          : (Py_INCREF(Py_None), Py_None);
    walk_clear(&a->walk[a->next]);
    ahead_forget_position(a);
    return out;
}

void crashdoc_ahead_free(void *state) {
    Ahead *a = state;
    if (a == NULL) return;
    crashdoc_ahead_join(a);
    if (a->started) {
        pthread_mutex_lock(&a->lock);
        a->quit = 1;
        pthread_cond_signal(&a->wake);
        pthread_mutex_unlock(&a->lock);
        pthread_join(a->thread, NULL);
    }
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->wake);
    pthread_cond_destroy(&a->done);
    for (int i = 0; i < 2; i++) {
        walk_clear(&a->walk[i]);
        free(a->walk[i].raw); free(a->walk[i].arena);
    }
    Py_CLEAR(a->names); Py_CLEAR(a->other_of);
    free(a->cursor);
    free(a);
}

/* with the GIL, no walk running: walk[index] from the reader's entry on, in a thread (-1: an exception set;
 * when no thread can start, nothing runs and the next call walks itself) */
static int ahead_start(Ahead *a, int index, sd_journal *j, long limit, PyObject *stop, PyObject *processes,
                       long max_bytes, int from_placement) {
    Walk *n = &a->walk[index];
    char *cursor = NULL; /* where the events handed out end: asked of no reader while the walk runs */
    ahead_forget_position(a);
    if (sd_journal_get_cursor(j, &cursor) >= 0 && sd_journal_get_realtime_usec(j, &a->usec) >= 0) {
        a->cursor = cursor; a->has_position = 1;
    } else {
        free(cursor);
        a->placed = from_placement; /* on no entry: just placed (diagnose's first walk, while it loads its library) */
    }
    if (walk_setup(n, j, limit, stop, processes, max_bytes) < 0 || walk_names(n, a->names) < 0) {
        ahead_forget_position(a); return -1;
    }
    if ((a->has_position || a->placed) && worker_walk(a, n) == 0) {
        a->running = 1;
    } else {
        walk_clear(n); ahead_forget_position(a);
    }
    return 0;
}

/* start walking the next batch now, after Python read the entry a batch stopped on, or (`placed`) placed the
 * reader: then crashdoc_ahead_drop says "" and Python places it again; None */
PyObject *crashdoc_ahead_start(PyObject *reader, void *state, long limit, PyObject *stop, PyObject *processes,
                               long max_bytes, long placed) {
    Ahead *a = state;
    if (a->running) Py_RETURN_NONE;
    if (ahead_start(a, a->next, ((SystemdReader *)reader)->j, limit, stop, processes, max_bytes, placed != 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* crashdoc_read_batch's contract, the walk read ahead: (lines, status, stepped, errors) of the walk that ran
 * since the last call (started with that call's limit) or of one walked now */
/* with the GIL: a process's first line, through first_of({field: bytes}, realtime usec, unit bytes) (Python's
 * rules: the process's template is made and kept in `processes`); its template kept for its next lines.
 * New reference: the line, or None */
static PyObject *first_line(Walk *w, Raw *raw, PyObject *processes, PyObject *first_of) {
    PyObject *fields = PyDict_New(), *unit = NULL, *key = NULL, *line = NULL;
    if (fields == NULL) return NULL;
    const char *names[] = {"MESSAGE", "_PID", "_SYSTEMD_INVOCATION_ID", "_CMDLINE"};
    long at[] = {(long)raw->off, raw->pid, raw->invocation, raw->cmdline};
    long n[] = {(long)raw->len, raw->npid, raw->ninvocation, raw->ncmdline};
    for (int f = 0; f < 4; f++) {
        if (at[f] < 0) continue;
        PyObject *value = PyBytes_FromStringAndSize(w->arena + at[f], n[f]);
        if (value == NULL || PyDict_SetItemString(fields, names[f], value) < 0) {
            Py_XDECREF(value); Py_DECREF(fields); return NULL;
        }
        Py_DECREF(value);
    }
    PyObject *pid = PyDict_GetItemString(fields, "_PID"); /* borrowed */
    unit = PyBytes_FromStringAndSize(w->arena + raw->unit, raw->nunit);
    PyObject *usec = unit ? PyLong_FromUnsignedLongLong(raw->usec) : NULL;
    if (usec != NULL) {
        PyObject *args[3] = {fields, usec, unit};
        line = PyObject_Vectorcall(first_of, args, 3, NULL);
        Py_DECREF(usec);
    }
    if (line != NULL && (key = PyTuple_Pack(2, unit, pid)) != NULL) {
        PyObject *template = PyDict_GetItemWithError(processes, key); /* None: the unit is not watched */
        if (template == NULL && PyErr_Occurred()) Py_CLEAR(line);
        Py_XINCREF(template);
        w->fresh[-1 - raw->key] = template;
    } else {
        Py_CLEAR(line);
    }
    Py_XDECREF(key); Py_XDECREF(unit); Py_DECREF(fields);
    return line;
}

/* with the GIL: an entry kept whole, through other_of({field: bytes}, realtime usec) -> [events]; new reference */
static PyObject *other_entry(Walk *w, Raw *raw, PyObject *other_of) {
    PyObject *fields = PyDict_New();
    if (fields == NULL) return NULL;
    for (size_t at = raw->off; at < raw->off + raw->len;) {
        uint32_t n;
        memcpy(&n, w->arena + at, sizeof n);
        const char *d = w->arena + at + sizeof n, *eq = memchr(d, '=', n);
        at += sizeof n + n;
        if (eq == NULL) continue;
        PyObject *name = PyUnicode_DecodeASCII(d, eq - d, "replace");
        int has = name != NULL ? PyDict_Contains(fields, name) : -1;
        PyObject *value = has == 0 ? PyBytes_FromStringAndSize(eq + 1, (Py_ssize_t)(n - (eq + 1 - d))) : NULL;
        int bad = has < 0 || (has == 0 && (value == NULL || PyDict_SetItem(fields, name, value) < 0));
        Py_XDECREF(name); Py_XDECREF(value);
        if (bad) { Py_DECREF(fields); return NULL; }
    }
    PyObject *usec = PyLong_FromUnsignedLongLong(raw->usec), *out = NULL;
    if (usec != NULL) {
        PyObject *args[2] = {fields, usec};
        out = PyObject_Vectorcall(other_of, args, 2, NULL);
        Py_DECREF(usec);
    }
    Py_DECREF(fields);
    if (out != NULL && !PyList_Check(out)) { Py_DECREF(out); PyErr_SetString(PyExc_TypeError, "other_entry: a list"); return NULL; }
    return out;
}

PyObject *crashdoc_read_ahead(PyObject *reader, void *state, long limit, PyObject *stop, PyObject *processes,
                              long max_bytes, PyObject *line_of, PyObject *text_of, PyObject *first_of) {
    Ahead *a = state;
    sd_journal *j = ((SystemdReader *)reader)->j;
    Walk *w = &a->walk[a->next];
    if (!crashdoc_ahead_join(a)) {
        if (walk_setup(w, j, limit, stop, processes, max_bytes) < 0 || walk_names(w, a->names) < 0) return NULL;
        Py_BEGIN_ALLOW_THREADS
        walk_run(w);
        Py_END_ALLOW_THREADS
    }
    ahead_forget_position(a);
    if (w->oom) { walk_clear(w); return PyErr_NoMemory(); }
    /* the next batch is walked while this one becomes lines; after a record of PID 1's, with no process known
     * (Python forgets some while it reads this batch: each process's next line is then read as a first line) */
    if (w->status == LIMIT) {
        PyObject *known = w->forgot ? PyDict_New() : (Py_INCREF(processes), processes);
        int started = known != NULL ? ahead_start(a, 1 - a->next, j, limit, stop, known, max_bytes, 0) : -1;
        Py_XDECREF(known);
        if (started < 0) return NULL;
    }
    PyObject *out = PyList_New(0);
    int failed = out == NULL;
    for (size_t i = 0; i < w->nraw && !failed; i++) {
        Raw *raw = &w->raw[i];
        if (raw->first == 2) {
            PyObject *found = other_entry(w, raw, a->other_of);
            failed = found == NULL || PyList_SetSlice(out, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, found) < 0;
            Py_XDECREF(found);
            continue;
        }
        if (raw->first >= 0) {
            PyObject *line = first_line(w, raw, processes, first_of);
            failed = line == NULL || (line != Py_None && PyList_Append(out, line) < 0);
            Py_XDECREF(line);
            continue;
        }
        PyObject *template = raw->key >= 0 ? PyList_GET_ITEM(w->known, raw->key) : w->fresh[-1 - raw->key];
        if (template == NULL) continue; /* a process of a unit not watched: Python keeps none of its lines */
        PyObject *text = message_text(w->arena + raw->off, raw->len, -1, text_of);
        PyObject *ts = text ? PyFloat_FromDouble((double)raw->usec / 1e6) : NULL;
        PyObject *line = NULL;
        if (ts != NULL) {
            PyObject *args[3] = {template, text, ts};
            line = PyObject_Vectorcall(line_of, args, 3, NULL);
        }
        failed = line == NULL || PyList_Append(out, line) < 0;
        Py_XDECREF(text); Py_XDECREF(ts); Py_XDECREF(line);
    }
    long status = w->status, stepped = w->stepped, errors = w->errors;
    walk_clear(w);
    a->next = 1 - a->next;
    if (failed) { Py_XDECREF(out); return NULL; }
    return Py_BuildValue("(Nlll)", out, status, stepped, errors);
}
