/* _frscan: Flight Recorder pickle dumps straight into columns, executing nothing.

A small pickle machine for the opcodes that builtin data is written with (what torch's C++
pickler and Python's pickle write for dicts, lists, tuples, sets, str, bytes, int, float, bool,
None; memo, framing). It has no opcode that names a callable (GLOBAL, REDUCE, BUILD, INST, OBJ,
NEWOBJ, EXT, PERSID): on any of those, on a malformed stream, or on a shape it does not
recognise it gives up (returns None) and the caller reads the file with the restricted
unpickler instead, which decides what to refuse. So nothing here ever runs code.

What makes it fast is the `entries` list of the root dict: its entry dicts are never built.
Each entry's key/value pairs are located first (a scan of opcode lengths only), then every value
of a key the caller asked for goes into a column: ints as int64 (no int object), anything else
as an id per distinct value. A value whose bytes (memo puts left out) were seen before is the
object built the first time, memo side effects replayed: an entry costs a few hash look-ups,
not twenty objects. Keys not asked for are skipped the same way.

decode(data, int_keys, obj_keys) -> None or
    (root, n_entries, int_columns, int_flags, obj_columns, obj_tables)
  int_columns[k]: bytes of n int64 (MISSING / NONE_VALUE sentinels), int_flags[k]: bit set of
  INT, BOOL, NONE, MISSING_SEEN, OTHER; obj_columns[k]: bytes of n int32 ids (-1: key absent),
  obj_tables[k]: list of the distinct objects (by identity) the ids index.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MISSING INT64_MIN
#define NONE_VALUE (INT64_MIN + 1)
enum { F_INT = 1, F_BOOL = 2, F_NONE = 4, F_MISSING = 8, F_OTHER = 16 };
#define MEMO_LIMIT (1 << 26)
#define MAX_KEYS 32
#define KEY_SLOTS 128

typedef struct {
    PyObject_HEAD Py_ssize_t index;
} Entry;

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_frscan.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT,
};
#define IS_ENTRY(o) (Py_TYPE(o) == &EntryType)

typedef struct {  /* identity -> id, open addressing */
    PyObject **keys;
    int32_t *ids;
    Py_ssize_t cap, n;
    PyObject *table; /* list: id -> object (holds the references) */
} IdMap;

typedef struct {
    uint64_t hash; /* 0: empty */
    Py_ssize_t off, len;
    PyObject *obj, *memod;
} CacheSlot;

typedef struct {
    const unsigned char *buf;
    Py_ssize_t len;
    PyObject **stack;
    Py_ssize_t sp, scap;
    Py_ssize_t *marks;
    Py_ssize_t nmarks, mcap;
    PyObject **memo;
    Py_ssize_t memo_cap, memo_count;
    PyObject *entries;      /* the root's entries list, once seen (borrowed: on the stack) */
    Py_ssize_t rows, rcap, appended;
    PyObject *keymap;       /* str -> column: < ni int columns, else object columns */
    Py_ssize_t ni, no;
    int64_t *icol[MAX_KEYS];
    int iflags[MAX_KEYS];
    int32_t *ocol[MAX_KEYS];
    IdMap omap[MAX_KEYS];
    CacheSlot *cslots;      /* the value cache (build_slot) */
    Py_ssize_t ccap, cn, clears;
    unsigned char *arena;   /* its keys' bytes */
    Py_ssize_t arena_len, arena_cap;
    PyObject *rec;          /* while building a cached value: the objects it memoises */
    int in_span;
    Py_ssize_t *slots, *nslot, *pslot, *gslot;
    Py_ssize_t slot_cap;
    Py_ssize_t *gets; /* memo references of the entry being read, in order (checked if skipped) */
    Py_ssize_t get_cap;
    unsigned char *norm;
    Py_ssize_t norm_cap;
    Py_ssize_t *puts;
    Py_ssize_t put_cap;
    PyObject *kobj[KEY_SLOTS]; /* key object -> column, by address */
    Py_ssize_t kcol[KEY_SLOTS];
    int nkeys;
} VM;

/* ---- small helpers ---- */

static int grow(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    if (need <= *cap) return 0;
    Py_ssize_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = PyMem_Realloc(*p, (size_t)n * item);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int push(VM *vm, PyObject *o) { /* steals o */
    if (!o) return -1;
    if (grow((void **)&vm->stack, &vm->scap, vm->sp + 1, sizeof(PyObject *)) < 0) {
        Py_DECREF(o);
        return -1;
    }
    vm->stack[vm->sp++] = o;
    return 0;
}

static Py_ssize_t top_mark(VM *vm) { return vm->nmarks ? vm->marks[vm->nmarks - 1] : -1; }

static int64_t le_int(const unsigned char *p, Py_ssize_t n) { /* n <= 8, two's complement */
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    if (n && n < 8 && (p[n - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * n);
    return (int64_t)v;
}

static Py_ssize_t le_size(const unsigned char *p, int n) { /* unsigned length fields */
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v > (uint64_t)PY_SSIZE_T_MAX ? -1 : (Py_ssize_t)v;
}

/* Total length of the opcode at p (opcode and argument), -1 if unknown or past the end. */
static Py_ssize_t oplen(const unsigned char *p, const unsigned char *end) {
    Py_ssize_t n, a;
    switch (*p) {
    case '(': case '0': case '1': case '2': case '}': case ']': case ')': case 0x8f: case 0x90:
    case 0x91: case 'd': case 'l': case 't': case 0x85: case 0x86: case 0x87: case 'a': case 'e':
    case 's': case 'u': case 'N': case 0x88: case 0x89: case 0x94: case '.':
        n = 1; break;
    case 0x80: case 'K': case 'q': case 'h': n = 2; break;
    case 'M': n = 3; break;
    case 'J': case 'r': case 'j': n = 5; break;
    case 'G': case 0x95: n = 9; break;
    case 0x8a: case 0x8c: case 'C':
        if (end - p < 2) return -1;
        n = 2 + p[1]; break;
    case 0x8b: case 'X': case 'B':
        if (end - p < 5) return -1;
        a = le_size(p + 1, 4);
        if (a < 0) return -1;
        n = 5 + a; break;
    case 0x8d: case 0x8e:
        if (end - p < 9) return -1;
        a = le_size(p + 1, 8);
        if (a < 0 || a > PY_SSIZE_T_MAX - 9) return -1;
        n = 9 + a; break;
    default: return -1;
    }
    return n <= end - p ? n : -1;
}

/* ---- memo ---- */

static void cache_clear(VM *vm);

static int memo_put(VM *vm, Py_ssize_t idx, PyObject *o) {
    /* a stream memoises at most one object per byte: a larger index is no dump (and a few
       bytes must not make us allocate gigabytes) */
    if (idx < 0 || idx >= MEMO_LIMIT || idx > vm->len) return -1;
    if (idx >= vm->memo_cap) {
        Py_ssize_t old = vm->memo_cap;
        if (grow((void **)&vm->memo, &vm->memo_cap, idx + 1, sizeof(PyObject *)) < 0) return -1;
        memset(vm->memo + old, 0, (size_t)(vm->memo_cap - old) * sizeof(PyObject *));
    }
    Py_INCREF(o);
    if (vm->memo[idx]) { /* a slot written twice: cached values may hold the old object */
        Py_DECREF(vm->memo[idx]);
        cache_clear(vm);
        vm->clears++;
    } else {
        vm->memo_count++;
    }
    vm->memo[idx] = o;
    if (vm->rec && PyList_Append(vm->rec, o) < 0) return -1;
    return 0;
}

static PyObject *memo_get(VM *vm, Py_ssize_t idx) {
    if (idx < 0 || idx >= vm->memo_cap || !vm->memo[idx]) return NULL;
    return vm->memo[idx];
}

/* ---- columns ---- */

static int idmap_get(IdMap *m, PyObject *o, int32_t *id) {
    if (m->n * 2 >= m->cap) {
        Py_ssize_t cap = m->cap ? m->cap * 2 : 64;
        PyObject **keys = PyMem_Calloc((size_t)cap, sizeof(PyObject *));
        int32_t *ids = PyMem_Calloc((size_t)cap, sizeof(int32_t));
        if (!keys || !ids) { PyMem_Free(keys); PyMem_Free(ids); return -1; }
        for (Py_ssize_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t h = ((size_t)m->keys[i] >> 4) & (size_t)(cap - 1);
            while (keys[h]) h = (h + 1) & (size_t)(cap - 1);
            keys[h] = m->keys[i];
            ids[h] = m->ids[i];
        }
        PyMem_Free(m->keys); PyMem_Free(m->ids);
        m->keys = keys; m->ids = ids; m->cap = cap;
    }
    size_t h = ((size_t)o >> 4) & (size_t)(m->cap - 1);
    while (m->keys[h]) {
        if (m->keys[h] == o) { *id = m->ids[h]; return 0; }
        h = (h + 1) & (size_t)(m->cap - 1);
    }
    if (PyList_Append(m->table, o) < 0) return -1; /* keeps o alive: its address stays unique */
    m->keys[h] = o;
    m->ids[h] = (int32_t)m->n;
    *id = (int32_t)m->n++;
    return 0;
}

static int new_row(VM *vm) {
    Py_ssize_t r = vm->rows, cap = vm->rcap;
    if (r >= cap) {
        Py_ssize_t n = cap ? cap * 2 : 1024;
        for (Py_ssize_t k = 0; k < vm->ni; k++) {
            Py_ssize_t c = cap;
            if (grow((void **)&vm->icol[k], &c, n, sizeof(int64_t)) < 0) return -1;
        }
        for (Py_ssize_t k = 0; k < vm->no; k++) {
            Py_ssize_t c = cap;
            if (grow((void **)&vm->ocol[k], &c, n, sizeof(int32_t)) < 0) return -1;
        }
        vm->rcap = n;
    }
    for (Py_ssize_t k = 0; k < vm->ni; k++) vm->icol[k][r] = MISSING;
    for (Py_ssize_t k = 0; k < vm->no; k++) vm->ocol[k][r] = -1;
    vm->rows++;
    return 0;
}

static Py_ssize_t column_of(VM *vm, PyObject *key) { /* -1: not asked for, -2: error */
    /* keys are the same few memoised strings in every entry: remember them by address (the
       references held keep the addresses unique) */
    size_t h = ((size_t)key >> 4) & (KEY_SLOTS - 1);
    for (int probe = 0; probe < KEY_SLOTS; probe++, h = (h + 1) & (KEY_SLOTS - 1)) {
        if (vm->kobj[h] == key) return vm->kcol[h];
        if (!vm->kobj[h]) break;
    }
    Py_ssize_t col = -1;
    if (PyUnicode_Check(key)) {
        PyObject *c = PyDict_GetItemWithError(vm->keymap, key);
        if (!c && PyErr_Occurred()) return -2;
        if (c) col = PyLong_AsSsize_t(c);
    }
    if (vm->nkeys < KEY_SLOTS / 2 && !vm->kobj[h]) {
        Py_INCREF(key);
        vm->kobj[h] = key;
        vm->kcol[h] = col;
        vm->nkeys++;
    }
    return col;
}

static void set_int(VM *vm, Py_ssize_t col, Py_ssize_t row, int64_t v, int flag) {
    vm->icol[col][row] = v;
    vm->iflags[col] |= flag;
}

static int set_value(VM *vm, Py_ssize_t row, Py_ssize_t col, PyObject *v) {
    if (IS_ENTRY(v)) return -1;
    if (col < vm->ni) {
        if (v == Py_None) set_int(vm, col, row, NONE_VALUE, F_NONE);
        else if (PyBool_Check(v)) set_int(vm, col, row, v == Py_True, F_BOOL);
        else if (PyLong_Check(v)) {
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (x == -1 && PyErr_Occurred()) return -1;
            if (overflow || x <= NONE_VALUE) set_int(vm, col, row, MISSING, F_OTHER);
            else set_int(vm, col, row, x, F_INT);
        } else set_int(vm, col, row, MISSING, F_OTHER);
        return 0;
    }
    col -= vm->ni;
    int32_t id;
    if (idmap_get(&vm->omap[col], v, &id) < 0) return -1;
    vm->ocol[col][row] = id;
    return 0;
}

/* A FRAME at pos declares its length: the unpickler reads that many bytes past it at once, so
   a frame that runs past the data is a truncated pickle to it; the same here (-1). */
static int frame_fits(VM *vm, Py_ssize_t pos) {
    Py_ssize_t a = le_size(vm->buf + pos + 1, 8);
    return a >= 0 && a <= vm->len - pos - 9 ? 0 : -1;
}

/* ---- the machine ---- */

static Py_ssize_t fast_entry(VM *vm, Py_ssize_t start, Py_ssize_t end, Py_ssize_t row);

static int no_entries(VM *vm, Py_ssize_t from) { /* an entry placeholder used as data: give up */
    for (Py_ssize_t i = from; i < vm->sp; i++)
        if (IS_ENTRY(vm->stack[i])) return -1;
    return 0;
}

/* Runs opcodes from `pos` to `end` (or STOP). Returns the position reached, -1 to give up. */
static Py_ssize_t run(VM *vm, Py_ssize_t pos, Py_ssize_t end, int *stopped) {
    const unsigned char *buf = vm->buf;
    while (pos < end) {
        const unsigned char *p = buf + pos;
        Py_ssize_t n = oplen(p, buf + end);
        if (n < 0) return -1;
        Py_ssize_t m = top_mark(vm), i;
        PyObject *o, *t;
        switch (*p) {
        case 0x80: break; /* PROTO */
        case 0x95: /* FRAME */
            if (frame_fits(vm, pos) < 0) return -1;
            break;
        case '.':
            *stopped = 1;
            return pos + 1;
        case '(':
            if (!vm->in_span && vm->sp && IS_ENTRY(vm->stack[vm->sp - 1])) {
                Entry *e = (Entry *)vm->stack[vm->sp - 1];
                Py_ssize_t q = fast_entry(vm, pos + 1, end, e->index);
                if (q == -1) return -1;
                if (q > 0) { pos = q; continue; }
            }
            if (grow((void **)&vm->marks, &vm->mcap, vm->nmarks + 1, sizeof(Py_ssize_t)) < 0) return -1;
            vm->marks[vm->nmarks++] = vm->sp;
            break;
        case '0': /* POP (a mark, when the stack is at one) */
            if (m == vm->sp && m >= 0) vm->nmarks--;
            else if (vm->sp > (m < 0 ? 0 : m)) { vm->sp--; Py_DECREF(vm->stack[vm->sp]); }
            else return -1;
            break;
        case '1': /* POP_MARK */
            if (m < 0) return -1;
            while (vm->sp > m) { vm->sp--; Py_DECREF(vm->stack[vm->sp]); }
            vm->nmarks--;
            break;
        case '2': /* DUP */
            if (vm->sp <= (m < 0 ? 0 : m)) return -1;
            o = vm->stack[vm->sp - 1];
            Py_INCREF(o);
            if (push(vm, o) < 0) return -1;
            break;
        case '}':
            if (vm->entries && !vm->in_span &&
                ((m >= 1 && vm->stack[m - 1] == vm->entries) ||
                 (vm->sp && vm->stack[vm->sp - 1] == vm->entries))) {
                if (new_row(vm) < 0) return -1;
                Entry *e = PyObject_New(Entry, &EntryType);
                if (!e) return -1;
                e->index = vm->rows - 1;
                if (push(vm, (PyObject *)e) < 0) return -1;
            } else if (push(vm, PyDict_New()) < 0) return -1;
            break;
        case ']':
            o = PyList_New(0);
            if (!o) return -1;
            /* the root's "entries": [root, MARK, k, v, ..., "entries"] or [root, "entries"] */
            if (!vm->entries && !vm->in_span && vm->sp >= 2 && PyDict_Check(vm->stack[0]) &&
                ((m == 1 && (vm->sp - m) % 2 == 1) || (m < 0 && vm->sp == 2)) &&
                PyUnicode_Check(vm->stack[vm->sp - 1]) &&
                PyUnicode_CompareWithASCIIString(vm->stack[vm->sp - 1], "entries") == 0)
                vm->entries = o;
            if (push(vm, o) < 0) return -1;
            break;
        case ')': if (push(vm, PyTuple_New(0)) < 0) return -1; break;
        case 0x8f: if (push(vm, PySet_New(NULL)) < 0) return -1; break;
        case 'N': Py_INCREF(Py_None); if (push(vm, Py_None) < 0) return -1; break;
        case 0x88: Py_INCREF(Py_True); if (push(vm, Py_True) < 0) return -1; break;
        case 0x89: Py_INCREF(Py_False); if (push(vm, Py_False) < 0) return -1; break;
        case 'K': if (push(vm, PyLong_FromLong(p[1])) < 0) return -1; break;
        case 'M': if (push(vm, PyLong_FromLong(p[1] | (p[2] << 8))) < 0) return -1; break;
        case 'J': if (push(vm, PyLong_FromLong((long)(int32_t)le_int(p + 1, 4))) < 0) return -1; break;
        case 0x8a: /* LONG1 */
            if (p[1] > 8) return -1;
            if (push(vm, PyLong_FromLongLong(le_int(p + 2, p[1]))) < 0) return -1;
            break;
        case 0x8b: return -1; /* LONG4: huge ints, never in FR */
        case 'G':
#if PY_VERSION_HEX >= 0x030B0000
            if (push(vm, PyFloat_FromDouble(PyFloat_Unpack8((const char *)p + 1, 0))) < 0) return -1;
#else
            if (push(vm, PyFloat_FromDouble(_PyFloat_Unpack8(p + 1, 0))) < 0) return -1;
#endif
            break;
        case 'X': case 0x8c: case 0x8d: {
            Py_ssize_t h = *p == 'X' ? 5 : (*p == 0x8c ? 2 : 9);
            if (push(vm, PyUnicode_DecodeUTF8((const char *)p + h, n - h, "surrogatepass")) < 0) return -1;
            break;
        }
        case 'B': case 'C': case 0x8e: {
            Py_ssize_t h = *p == 'B' ? 5 : (*p == 'C' ? 2 : 9);
            if (push(vm, PyBytes_FromStringAndSize((const char *)p + h, n - h)) < 0) return -1;
            break;
        }
        case 'q': case 'r': case 0x94: /* BINPUT, LONG_BINPUT, MEMOIZE */
            if (vm->sp <= (m < 0 ? 0 : m)) return -1;
            i = *p == 'q' ? p[1] : (*p == 'r' ? le_size(p + 1, 4) : vm->memo_count);
            if (memo_put(vm, i, vm->stack[vm->sp - 1]) < 0) return -1;
            break;
        case 'h': case 'j':
            o = memo_get(vm, *p == 'h' ? p[1] : le_size(p + 1, 4));
            if (!o) return -1;
            Py_INCREF(o);
            if (push(vm, o) < 0) return -1;
            break;
        case 0x85: case 0x86: case 0x87: case 't': case 'l': case 'd': case 0x91: {
            Py_ssize_t k = *p == 0x85 ? 1 : *p == 0x86 ? 2 : *p == 0x87 ? 3 : -1, from;
            if (k < 0) { if (m < 0) return -1; from = m; }
            else { from = vm->sp - k; if (from < (m < 0 ? 0 : m)) return -1; }
            if (no_entries(vm, from) < 0) return -1;
            Py_ssize_t cnt = vm->sp - from;
            if (*p == 'l') {
                o = PyList_New(cnt);
                if (!o) return -1;
                for (i = 0; i < cnt; i++) PyList_SET_ITEM(o, i, vm->stack[from + i]);
            } else if (*p == 'd') {
                if (cnt % 2) return -1;
                o = PyDict_New();
                if (!o) return -1;
                for (i = 0; i < cnt; i += 2)
                    if (PyDict_SetItem(o, vm->stack[from + i], vm->stack[from + i + 1]) < 0) { Py_DECREF(o); return -1; }
                for (i = 0; i < cnt; i++) Py_DECREF(vm->stack[from + i]);
            } else if (*p == 0x91) {
                t = PyTuple_New(cnt);
                if (!t) return -1;
                for (i = 0; i < cnt; i++) PyTuple_SET_ITEM(t, i, vm->stack[from + i]);
                o = PyFrozenSet_New(t);
                Py_DECREF(t);
                if (!o) { vm->sp = from; return -1; }
            } else {
                o = PyTuple_New(cnt);
                if (!o) return -1;
                for (i = 0; i < cnt; i++) PyTuple_SET_ITEM(o, i, vm->stack[from + i]);
            }
            vm->sp = from;
            if (k < 0) vm->nmarks--;
            if (push(vm, o) < 0) return -1;
            break;
        }
        case 'a': case 'e': case 0x90: { /* APPEND, APPENDS, ADDITEMS */
            Py_ssize_t from = *p == 'a' ? vm->sp - 1 : m;
            if (from < 1 || (*p == 'a' && from < (m < 0 ? 0 : m) + 1)) return -1;
            t = vm->stack[from - 1];
            if (*p == 0x90 ? !PySet_Check(t) : !PyList_Check(t)) return -1;
            for (i = from; i < vm->sp; i++) {
                o = vm->stack[i];
                if (t == vm->entries) {
                    if (!IS_ENTRY(o) || ((Entry *)o)->index != vm->appended) return -1;
                    vm->appended++;
                } else if (IS_ENTRY(o)) return -1;
                if ((*p == 0x90 ? PySet_Add(t, o) : PyList_Append(t, o)) < 0) return -1;
            }
            while (vm->sp > from) { vm->sp--; Py_DECREF(vm->stack[vm->sp]); }
            if (*p != 'a') vm->nmarks--;
            break;
        }
        case 's': case 'u': { /* SETITEM, SETITEMS */
            Py_ssize_t from = *p == 's' ? vm->sp - 2 : m;
            if (from < 1 || (*p == 's' && from < (m < 0 ? 0 : m) + 1) || (vm->sp - from) % 2) return -1;
            t = vm->stack[from - 1];
            for (i = from; i < vm->sp; i += 2) {
                PyObject *k = vm->stack[i], *v = vm->stack[i + 1];
                if (IS_ENTRY(k) || IS_ENTRY(v)) return -1;
                if (IS_ENTRY(t)) {
                    if (!PyUnicode_Check(k)) return -1;
                    Py_ssize_t col = column_of(vm, k);
                    if (col == -2 || (col >= 0 && set_value(vm, ((Entry *)t)->index, col, v) < 0)) return -1;
                } else if (!PyDict_Check(t) || PyDict_SetItem(t, k, v) < 0) return -1;
            }
            while (vm->sp > from) { vm->sp--; Py_DECREF(vm->stack[vm->sp]); }
            if (*p == 'u') vm->nmarks--;
            break;
        }
        default:
            return -1;
        }
        pos += n;
    }
    return pos;
}

/* One value (or key) of an entry: the opcodes [start, end) build exactly one object. */
static PyObject *build(VM *vm, Py_ssize_t start, Py_ssize_t end) {
    Py_ssize_t sp = vm->sp, nm = vm->nmarks;
    int stopped = 0, was = vm->in_span;
    vm->in_span = 1;
    Py_ssize_t q = run(vm, start, end, &stopped);
    vm->in_span = was;
    if (q != end || stopped || vm->sp != sp + 1 || vm->nmarks != nm) return NULL;
    return vm->stack[--vm->sp]; /* new reference */
}

/* The value cache: normalised bytes (the slot's opcodes, memo puts and frames left out) ->
   the object built from them and the objects its puts memoised, in order. */
static uint64_t fnv(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h ? h : 1;
}

static void cache_clear(VM *vm) {
    for (Py_ssize_t i = 0; i < vm->ccap; i++) {
        if (!vm->cslots[i].hash) continue;
        Py_DECREF(vm->cslots[i].obj);
        Py_DECREF(vm->cslots[i].memod);
        vm->cslots[i].hash = 0;
    }
    vm->cn = 0;
    vm->arena_len = 0;
}

static CacheSlot *cache_find(VM *vm, uint64_t h, const unsigned char *key, Py_ssize_t n) {
    if (!vm->ccap) return NULL;
    size_t i = (size_t)h & (size_t)(vm->ccap - 1);
    while (vm->cslots[i].hash) {
        CacheSlot *c = &vm->cslots[i];
        if (c->hash == h && c->len == n && memcmp(vm->arena + c->off, key, (size_t)n) == 0) return c;
        i = (i + 1) & (size_t)(vm->ccap - 1);
    }
    return NULL;
}

static int cache_add(VM *vm, uint64_t h, const unsigned char *key, Py_ssize_t n, PyObject *obj, PyObject *memod) {
    if ((vm->cn + 1) * 2 > vm->ccap) {
        Py_ssize_t cap = vm->ccap ? vm->ccap * 2 : 256;
        CacheSlot *s = PyMem_Calloc((size_t)cap, sizeof(CacheSlot));
        if (!s) return -1;
        for (Py_ssize_t i = 0; i < vm->ccap; i++) {
            if (!vm->cslots[i].hash) continue;
            size_t j = (size_t)vm->cslots[i].hash & (size_t)(cap - 1);
            while (s[j].hash) j = (j + 1) & (size_t)(cap - 1);
            s[j] = vm->cslots[i];
        }
        PyMem_Free(vm->cslots);
        vm->cslots = s;
        vm->ccap = cap;
    }
    if (grow((void **)&vm->arena, &vm->arena_cap, vm->arena_len + n, 1) < 0) return -1;
    memcpy(vm->arena + vm->arena_len, key, (size_t)n);
    size_t j = (size_t)h & (size_t)(vm->ccap - 1);
    while (vm->cslots[j].hash) j = (j + 1) & (size_t)(vm->ccap - 1);
    CacheSlot *c = &vm->cslots[j];
    c->hash = h;
    c->off = vm->arena_len;
    c->len = n;
    Py_INCREF(obj);
    Py_INCREF(memod);
    c->obj = obj;
    c->memod = memod;
    vm->arena_len += n;
    vm->cn++;
    return 0;
}

/* Slot i of the entry being read (fast_entry's scan: its opcodes [slots[i], slots[i+1]),
   normalised bytes norm[nslot[i], nslot[i+1]), memo puts puts[pslot[i], pslot[i+1])) through
   the cache: same bytes -> the same object, its memo puts replayed. */
static PyObject *build_slot(VM *vm, Py_ssize_t i) {
    Py_ssize_t start = vm->slots[i], end = vm->slots[i + 1];
    const unsigned char *p = vm->buf + start;
    Py_ssize_t n = oplen(p, vm->buf + end);
    if (n == end - start && (*p == 'h' || *p == 'j')) { /* a memo reference: nothing to cache */
        PyObject *o = memo_get(vm, *p == 'h' ? p[1] : le_size(p + 1, 4));
        Py_XINCREF(o);
        return o;
    }
    const unsigned char *key = vm->norm + vm->nslot[i];
    Py_ssize_t klen = vm->nslot[i + 1] - vm->nslot[i];
    Py_ssize_t *puts = vm->puts + vm->pslot[i], np = vm->pslot[i + 1] - vm->pslot[i];
    uint64_t h = fnv(key, klen);
    CacheSlot *hit = cache_find(vm, h, key, klen);
    if (hit) {
        PyObject *obj = hit->obj, *memod = hit->memod;
        if (PyTuple_GET_SIZE(memod) != np) return NULL;
        Py_INCREF(obj);
        Py_INCREF(memod); /* a put may clear the cache */
        for (Py_ssize_t k = 0; k < np; k++)
            if (memo_put(vm, puts[k] < 0 ? vm->memo_count : puts[k], PyTuple_GET_ITEM(memod, k)) < 0) {
                Py_DECREF(memod);
                Py_DECREF(obj);
                return NULL;
            }
        Py_DECREF(memod);
        return obj;
    }
    PyObject *rec = PyList_New(0);
    if (!rec) return NULL;
    vm->rec = rec;
    Py_ssize_t clears = vm->clears;
    PyObject *obj = build(vm, start, end);
    vm->rec = NULL;
    if (obj && vm->clears == clears) { /* not cached when its own puts rewrote the memo */
        PyObject *memod = PyList_AsTuple(rec);
        if (!memod || cache_add(vm, h, key, klen, obj, memod) < 0) Py_CLEAR(obj);
        Py_XDECREF(memod);
    }
    Py_DECREF(rec);
    return obj;
}

/* A single int / None / bool opcode spanning [start, end): its value without an object. */
static int plain_int(VM *vm, Py_ssize_t start, Py_ssize_t end, int64_t *v, int *flag) {
    const unsigned char *p = vm->buf + start;
    if (oplen(p, vm->buf + end) != end - start) return 0;
    switch (*p) {
    case 'K': *v = p[1]; *flag = F_INT; return 1;
    case 'M': *v = p[1] | (p[2] << 8); *flag = F_INT; return 1;
    case 'J': *v = (int32_t)le_int(p + 1, 4); *flag = F_INT; return 1;
    case 0x8a:
        if (p[1] > 8) return 0;
        *v = le_int(p + 2, p[1]);
        if (*v <= NONE_VALUE) return 0;
        *flag = F_INT;
        return 1;
    case 'N': *v = NONE_VALUE; *flag = F_NONE; return 1;
    case 0x88: *v = 1; *flag = F_BOOL; return 1;
    case 0x89: *v = 0; *flag = F_BOOL; return 1;
    }
    return 0;
}

static int slot_room(VM *vm, Py_ssize_t items) {
    Py_ssize_t a = vm->slot_cap, b = vm->slot_cap, c = vm->slot_cap, d = vm->slot_cap;
    if (items + 2 <= vm->slot_cap) return 0;
    if (grow((void **)&vm->slots, &a, items + 2, sizeof(Py_ssize_t)) < 0 ||
        grow((void **)&vm->nslot, &b, items + 2, sizeof(Py_ssize_t)) < 0 ||
        grow((void **)&vm->pslot, &c, items + 2, sizeof(Py_ssize_t)) < 0 ||
        grow((void **)&vm->gslot, &d, items + 2, sizeof(Py_ssize_t)) < 0)
        return -1;
    vm->slot_cap = a;
    return 0;
}

/* The body of an entry dict (after its MARK): locate each key and value at this level by
   opcode lengths alone, up to the SETITEMS that closes it (normalising each slot's bytes on
   the way), then build keys and values through the cache, ints straight into their columns,
   values not asked for skipped when they memoise nothing. Returns the position after the
   SETITEMS, 0 when the body is not a plain run of pairs (the caller executes it), -1 to
   give up. */
static Py_ssize_t fast_entry(VM *vm, Py_ssize_t start, Py_ssize_t end, Py_ssize_t row) {
    const unsigned char *buf = vm->buf;
    Py_ssize_t pos = start, items = 0, depth = 0, close = -1, saved = 0, nn = 0, np = 0, ng = 0;
    if (grow((void **)&vm->norm, &vm->norm_cap, 1024, 1) < 0) return -1;
    while (pos < end) {
        const unsigned char *p = buf + pos;
        Py_ssize_t n = oplen(p, buf + end);
        if (n < 0) return 0;
        if (depth == 0 && *p == 'u') { close = pos; break; }
        if (slot_room(vm, items) < 0) return -1;
        int is_put = 0;
        switch (*p) {
        case '(':
            if (depth == 0) {
                saved = items;
                vm->slots[items] = pos; /* where a TUPLE / LIST / DICT would start */
                vm->nslot[items] = nn;
                vm->pslot[items] = np;
                vm->gslot[items] = ng;
            }
            depth++;
            break;
        case 'e': case 'u': case 0x90: case '1':
            if (depth == 0) return 0;
            if (--depth == 0) items = saved;
            break;
        case 't': case 'l': case 'd': case 0x91:
            if (depth == 0) return 0;
            if (--depth == 0) items = saved + 1; /* its slot starts at the MARK */
            break;
        case 'a': if (depth == 0) { if (items < 2) return 0; items -= 1; } break;
        case 's': if (depth == 0) { if (items < 3) return 0; items -= 2; } break;
        case '0': case '2': case '.':
            if (depth == 0) return 0;
            break;
        case 0x85: if (depth == 0 && items < 1) return 0; break;
        case 0x86: if (depth == 0) { if (items < 2) return 0; items -= 1; } break;
        case 0x87: if (depth == 0) { if (items < 3) return 0; items -= 2; } break;
        case 'q': case 'r': case 0x94:
            if (depth == 0 && items == 0) return 0;
            is_put = 1;
            break;
        case 0x95: case 0x80:
            if (depth == 0 && items == 0) return 0;
            if (*p == 0x95 && frame_fits(vm, pos) < 0) return -1;
            pos += n;
            continue;
        default: /* a push */
            if (depth == 0) {
                vm->slots[items] = pos;
                vm->nslot[items] = nn;
                vm->pslot[items] = np;
                vm->gslot[items] = ng;
                items++;
            }
            if (*p == 'h' || *p == 'j') {
                if (grow((void **)&vm->gets, &vm->get_cap, ng + 1, sizeof(Py_ssize_t)) < 0) return -1;
                vm->gets[ng++] = *p == 'h' ? p[1] : le_size(p + 1, 4);
            }
        }
        if (is_put) {
            if (grow((void **)&vm->puts, &vm->put_cap, np + 1, sizeof(Py_ssize_t)) < 0) return -1;
            vm->puts[np++] = *p == 'q' ? p[1] : (*p == 'r' ? le_size(p + 1, 4) : -1);
        } else {
            if (grow((void **)&vm->norm, &vm->norm_cap, nn + n, 1) < 0) return -1;
            memcpy(vm->norm + nn, p, (size_t)n);
            nn += n;
        }
        pos += n;
    }
    if (close < 0 || items % 2) return 0;
    vm->slots[items] = close;
    vm->nslot[items] = nn;
    vm->pslot[items] = np;
    vm->gslot[items] = ng;
    for (Py_ssize_t i = 0; i < items; i += 2) {
        PyObject *key = build_slot(vm, i);
        if (!key) return -1;
        if (!PyUnicode_Check(key)) { Py_DECREF(key); return -1; } /* FR's keys are str */
        Py_ssize_t col = column_of(vm, key);
        Py_DECREF(key);
        if (col == -2) return -1;
        Py_ssize_t vs = vm->slots[i + 1], ve = vm->slots[i + 2];
        int64_t v;
        int flag;
        if (col >= 0 && col < vm->ni && plain_int(vm, vs, ve, &v, &flag)) {
            set_int(vm, col, row, v, flag);
            continue;
        }
        if (col < 0 && vm->pslot[i + 2] == vm->pslot[i + 1]) { /* not asked for, memoises nothing: */
            for (Py_ssize_t g = vm->gslot[i + 1]; g < vm->gslot[i + 2]; g++) /* skipped, if sound */
                if (!memo_get(vm, vm->gets[g])) return -1;
            continue;
        }
        PyObject *val = build_slot(vm, i + 1);
        int bad = !val || (col >= 0 && set_value(vm, row, col, val) < 0);
        Py_XDECREF(val);
        if (bad) return -1;
    }
    return close + 1;
}

/* ---- module ---- */

static void vm_free(VM *vm) {
    for (Py_ssize_t i = 0; i < vm->sp; i++) Py_DECREF(vm->stack[i]);
    for (Py_ssize_t i = 0; i < vm->memo_cap; i++) Py_XDECREF(vm->memo[i]);
    for (int i = 0; i < KEY_SLOTS; i++) Py_XDECREF(vm->kobj[i]);
    for (Py_ssize_t k = 0; k < MAX_KEYS; k++) {
        PyMem_Free(vm->icol[k]);
        PyMem_Free(vm->ocol[k]);
        PyMem_Free(vm->omap[k].keys);
        PyMem_Free(vm->omap[k].ids);
        Py_XDECREF(vm->omap[k].table);
    }
    PyMem_Free(vm->stack); PyMem_Free(vm->marks); PyMem_Free(vm->memo);
    cache_clear(vm);
    PyMem_Free(vm->cslots); PyMem_Free(vm->arena);
    PyMem_Free(vm->slots); PyMem_Free(vm->nslot); PyMem_Free(vm->pslot); PyMem_Free(vm->gslot);
    PyMem_Free(vm->gets);
    PyMem_Free(vm->norm); PyMem_Free(vm->puts);
    Py_XDECREF(vm->keymap); Py_XDECREF(vm->rec);
}

static PyObject *give_up(VM *vm) {
    PyErr_Clear();
    vm_free(vm);
    Py_RETURN_NONE;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer data;
    PyObject *int_keys, *obj_keys;
    if (!PyArg_ParseTuple(args, "y*O!O!", &data, &PyTuple_Type, &int_keys, &PyTuple_Type, &obj_keys)) return NULL;
    VM vm;
    memset(&vm, 0, sizeof vm);
    vm.buf = data.buf;
    vm.len = data.len;
    vm.ni = PyTuple_GET_SIZE(int_keys);
    vm.no = PyTuple_GET_SIZE(obj_keys);
    if (vm.ni + vm.no > MAX_KEYS) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "too many keys");
        return NULL;
    }
    vm.keymap = PyDict_New();
    PyObject *result = NULL;
    if (!vm.keymap) goto done;
    for (Py_ssize_t k = 0; k < vm.ni + vm.no; k++) {
        PyObject *key = PyTuple_GET_ITEM(k < vm.ni ? int_keys : obj_keys, k < vm.ni ? k : k - vm.ni);
        PyObject *c = PyLong_FromSsize_t(k);
        int bad = !c || PyDict_SetItem(vm.keymap, key, c) < 0;
        Py_XDECREF(c);
        if (bad) goto done;
    }
    for (Py_ssize_t k = 0; k < vm.no; k++)
        if (!(vm.omap[k].table = PyList_New(0))) goto done;
    int stopped = 0;
    Py_ssize_t q = run(&vm, 0, vm.len, &stopped);
    if (q < 0 || !stopped || vm.sp != 1 || vm.nmarks || IS_ENTRY(vm.stack[0]) ||
        (vm.entries && (vm.appended != vm.rows || PyList_GET_SIZE(vm.entries) != vm.rows))) {
        PyBuffer_Release(&data);
        return give_up(&vm);
    }
    PyObject *ints = PyTuple_New(vm.ni), *flags = PyTuple_New(vm.ni), *objs = PyTuple_New(vm.no),
             *tables = PyTuple_New(vm.no);
    if (ints && flags && objs && tables) {
        for (Py_ssize_t k = 0; k < vm.ni; k++) {
            PyTuple_SET_ITEM(ints, k, PyBytes_FromStringAndSize((const char *)vm.icol[k], vm.rows * 8));
            PyTuple_SET_ITEM(flags, k, PyLong_FromLong(vm.iflags[k]));
        }
        for (Py_ssize_t k = 0; k < vm.no; k++) {
            PyTuple_SET_ITEM(objs, k, PyBytes_FromStringAndSize((const char *)vm.ocol[k], vm.rows * 4));
            Py_INCREF(vm.omap[k].table);
            PyTuple_SET_ITEM(tables, k, vm.omap[k].table);
        }
        result = Py_BuildValue("OnOOOO", vm.stack[0], vm.rows, ints, flags, objs, tables);
    }
    Py_XDECREF(ints); Py_XDECREF(flags); Py_XDECREF(objs); Py_XDECREF(tables);
done:
    PyBuffer_Release(&data);
    vm_free(&vm);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "decode(data, int_keys, obj_keys): a dump's columns, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__frscan(void) {
    if (PyType_Ready(&EntryType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "INT", F_INT) < 0 || PyModule_AddIntConstant(m, "BOOL", F_BOOL) < 0 ||
        PyModule_AddIntConstant(m, "NONE", F_NONE) < 0 || PyModule_AddIntConstant(m, "OTHER", F_OTHER) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
