/* The KPL aggregation format's decoder in C: parse_body and decode_tags.
 *
 * The same reading as decoder.py's general parser (_parse_general, decode_tags), in time linear
 * in the input whatever it holds: a few nanoseconds per field instead of a turn of a Python loop,
 * so that any 1 MiB record decodes in milliseconds (tests/hostile.py's shapes; the pure-Python
 * parser takes up to 0.4 s on the worst of them).
 *
 * Invariants:
 *
 * - It returns exactly what the Python parser returns and raises AggregationFormatError with
 *   exactly its message, for any input: tests/test_aggregation.py and the fuzz target
 *   (tests/fuzz.py) run both on the same bytes and compare. Where the two could differ, the
 *   Python parser is the definition.
 * - Every read is checked against the buffer's length; nothing relies on the digest after the
 *   body (the Python parser does, and its IndexError handlers become the "truncated" and
 *   "cut off" errors here).
 * - Values of varints are read into 64 bits, saturating: only a comparison with a length or a
 *   table size follows, except in the "refers to" message, which reads the varint again, to
 *   any size, from its position.
 *
 * The module is optional: decoder.py uses the Python parser when it cannot be imported (no
 * compiler at install time) or when AIOKPL_NO_EXTENSIONS is set.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *format_error; /* aiokpl._core.errors.AggregationFormatError */
static PyObject *tag_type;     /* aiokpl._core.wire.Tag */

#define PREFIX "malformed aggregate body: "

/* What a failed step left: an exception set (ERROR) or a read past the buffer (OFF_END), which
 * the caller turns into its own message (the Python parser's IndexError handlers). */
enum { OK = 0, ERROR = -1, OFF_END = -2 };

typedef struct {
    const uint8_t *buf;
    Py_ssize_t size; /* readable bytes: the whole buffer, not only the part being parsed */
} Input;

/* Read the varint at *pos (at most 10 bytes, as wire.read_varint), saturating at UINT64_MAX. */
static int
read_varint(const Input *in, Py_ssize_t *pos, uint64_t *value)
{
    Py_ssize_t p = *pos;
    uint64_t result = 0;
    int saturated = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= in->size) {
            return OFF_END;
        }
        uint8_t b = in->buf[p++];
        uint64_t bits = b & 0x7F;
        result |= bits << shift; /* shift < 64; at 63 only the lowest bit fits */
        if (shift == 63 && bits > 1) {
            saturated = 1;
        }
        if (b < 0x80) {
            *value = saturated ? UINT64_MAX : result;
            *pos = p;
            return OK;
        }
    }
    PyErr_Format(format_error, PREFIX "varint at byte %zd is longer than 10 bytes", *pos);
    return ERROR;
}

/* The varint at pos, to any size, as a Python int (for a message); it was read before. */
static PyObject *
varint_object(const Input *in, Py_ssize_t pos)
{
    PyObject *result = PyLong_FromLong(0);
    for (int shift = 0; result != NULL && pos < in->size; shift += 7) {
        uint8_t b = in->buf[pos++];
        PyObject *bits = PyLong_FromLong(b & 0x7F);
        PyObject *by = PyLong_FromLong(shift);
        PyObject *shifted = (bits && by) ? PyNumber_Lshift(bits, by) : NULL;
        PyObject *sum = shifted ? PyNumber_Or(result, shifted) : NULL;
        Py_XDECREF(bits);
        Py_XDECREF(by);
        Py_XDECREF(shifted);
        Py_SETREF(result, sum);
        if (b < 0x80) {
            break;
        }
    }
    return result;
}

/* pos + length, or PY_SSIZE_T_MAX when that does not fit: past any limit either way. */
static inline Py_ssize_t
advance(Py_ssize_t pos, uint64_t length)
{
    if (length > (uint64_t)(PY_SSIZE_T_MAX - pos)) {
        return PY_SSIZE_T_MAX;
    }
    return pos + (Py_ssize_t)length;
}

/* Read a field's tag at *pos: one byte, or a varint of at most 5 bytes (decoder._read_tag). */
static inline int
read_tag(const Input *in, Py_ssize_t *pos, uint64_t *tag)
{
    uint8_t b = in->buf[*pos]; /* callers read tags only before their limit, inside the buffer */
    if (b < 0x80) {
        *tag = b;
        *pos += 1;
        return OK;
    }
    Py_ssize_t start = *pos;
    int status = read_varint(in, pos, tag);
    if (status == OK && *pos - start > 5) {
        PyErr_Format(format_error, PREFIX "field tag at byte %zd is longer than 5 bytes", start);
        return ERROR;
    }
    return status;
}

/* " of the record at byte N", or nothing for a field of the AggregatedRecord (record_start < 0):
 * written into where (64 bytes). */
static const char *
of_record(char *where, Py_ssize_t record_start)
{
    if (record_start < 0) {
        return "";
    }
    PyOS_snprintf(where, 64, " of the record at byte %zd", record_start);
    return where;
}

/* Skip the value of an unknown field whose tag was read (decoder._skip_field). */
static int
skip_field(const Input *in, Py_ssize_t *pos, Py_ssize_t limit, uint64_t tag,
           Py_ssize_t field_start, Py_ssize_t record_start)
{
    char where[64];
    unsigned wire_type = (unsigned)(tag & 7);
    uint64_t value;
    int status;
    if ((tag >> 3) == 0 || tag > 0xFFFFFFFFu) {
        PyErr_Format(format_error, PREFIX "field number %llu at byte %zd%s is out of range",
                     (unsigned long long)(tag >> 3), field_start, of_record(where, record_start));
        return ERROR;
    }
    Py_ssize_t p = *pos;
    switch (wire_type) {
    case 0:
        status = read_varint(in, &p, &value);
        if (status != OK) {
            return status;
        }
        break;
    case 2:
        status = read_varint(in, &p, &value);
        if (status != OK) {
            return status;
        }
        p = advance(p, value);
        break;
    case 1:
        p = advance(p, 8);
        break;
    case 5:
        p = advance(p, 4);
        break;
    default:
        PyErr_Format(format_error, PREFIX "field %llu at byte %zd%s has unsupported wire type %u",
                     (unsigned long long)(tag >> 3), field_start, of_record(where, record_start),
                     wire_type);
        return ERROR;
    }
    if (p > limit) {
        PyErr_Format(format_error, PREFIX "field %llu at byte %zd%s runs past the end of the %s",
                     (unsigned long long)(tag >> 3), field_start, of_record(where, record_start),
                     record_start < 0 ? "body" : "record");
        return ERROR;
    }
    *pos = p;
    return OK;
}

/* The last tag read and where its bytes are: a tag written with the same bytes is the same
 * (immutable) Tag, shared rather than built again. A record of 260,000 empty tags (the
 * worst shape for tags, tests/hostile.py) took twice as long when each had its own. */
typedef struct {
    PyObject *tag; /* a borrowed reference: the tag is held by the tags being collected */
    Py_ssize_t at, length;
} LastTag;

/* Parse the Tag in buf[pos:stop], of the record at byte start (decoder._parse_tag): a new
 * reference to a Tag, or NULL with *status set. */
static PyObject *
parse_tag(const Input *in, Py_ssize_t pos, Py_ssize_t stop, Py_ssize_t start, LastTag *last,
          int *status)
{
    if (last->tag != NULL && stop - pos == last->length &&
        memcmp(in->buf + pos, in->buf + last->at, (size_t)last->length) == 0) {
        return Py_NewRef(last->tag);
    }
    PyObject *key = NULL, *value = NULL;
    Py_ssize_t tag_start = pos;
    uint64_t tag, length;
    while (pos < stop) {
        Py_ssize_t field_start = pos;
        if ((*status = read_tag(in, &pos, &tag)) != OK) {
            goto fail;
        }
        if (tag == 0x0A || tag == 0x12) {
            if ((*status = read_varint(in, &pos, &length)) != OK) {
                goto fail;
            }
            Py_ssize_t end = advance(pos, length);
            if (end > stop) {
                PyErr_Format(format_error,
                             PREFIX "a field of the tag at byte %zd of the record at byte %zd "
                                    "runs past the end of the tag",
                             tag_start, start);
                *status = ERROR;
                goto fail;
            }
            PyObject *text = PyUnicode_DecodeUTF8((const char *)in->buf + pos, end - pos, NULL);
            if (text == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    *status = ERROR; /* MemoryError, as Python's would be */
                    goto fail;
                }
                PyErr_Clear();
                PyErr_Format(format_error,
                             PREFIX "the tag at byte %zd of the record at byte %zd has a %s that "
                                    "is not valid UTF-8",
                             tag_start, start, tag == 0x0A ? "key" : "value");
                *status = ERROR;
                goto fail;
            }
            if (tag == 0x0A) {
                Py_XSETREF(key, text);
            }
            else {
                Py_XSETREF(value, text);
            }
            pos = end;
        }
        else if ((*status = skip_field(in, &pos, stop, tag, field_start, start)) != OK) {
            goto fail;
        }
    }
    if (key == NULL) {
        PyErr_Format(format_error,
                     PREFIX "the tag at byte %zd of the record at byte %zd has no key (a "
                            "required field)",
                     tag_start, start);
        *status = ERROR;
        goto fail;
    }
    /* As tuple.__new__(Tag, (key, value)) would make it (a Tag is a tuple of two), but never
     * tracked by the collector: two strings (or a string and None) and no __dict__ (a
     * NamedTuple has empty __slots__), so it can be in no cycle. Tracked, a record of 260,000
     * tags took the collector longer than the decoding did. */
    PyObject *result = (PyObject *)PyObject_GC_NewVar(PyTupleObject, (PyTypeObject *)tag_type, 2);
    if (result == NULL) {
        *status = ERROR;
        goto fail;
    }
    if (value == NULL) {
        value = Py_NewRef(Py_None);
    }
#if PY_VERSION_HEX >= 0x030E0000
    /* A tuple caches its hash from 3.14 on: -1 until computed (tuple.__new__ sets it too; a
     * new object's memory holds anything, which would be taken for the hash). */
    ((PyTupleObject *)result)->ob_hash = -1;
#endif
    PyTuple_SET_ITEM(result, 0, key);
    PyTuple_SET_ITEM(result, 1, value);
    *last = (LastTag){result, tag_start, stop - tag_start};
    return result;
fail:
    Py_XDECREF(key);
    Py_XDECREF(value);
    return NULL;
}

/* A growing array of new references: the tags of the record being read. */
typedef struct {
    PyObject **items;
    Py_ssize_t count, capacity;
} Objects;

static int
objects_append(Objects *objects, PyObject *item)
{
    if (objects->count == objects->capacity) {
        Py_ssize_t capacity = objects->capacity ? objects->capacity * 2 : 8;
        PyObject **items = PyMem_Realloc(objects->items, (size_t)capacity * sizeof(PyObject *));
        if (items == NULL) {
            Py_DECREF(item);
            PyErr_NoMemory();
            return ERROR;
        }
        objects->items = items;
        objects->capacity = capacity;
    }
    objects->items[objects->count++] = item;
    return OK;
}

/* The items as a tuple (taking their references), or NULL; the array is left empty. */
static PyObject *
objects_take_tuple(Objects *objects)
{
    PyObject *tuple = PyTuple_New(objects->count);
    if (tuple == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < objects->count; i++) {
        PyTuple_SET_ITEM(tuple, i, objects->items[i]);
    }
    objects->count = 0;
    /* Of Tags, which the collector does not follow (parse_tag): no cycle through it either. */
    PyObject_GC_UnTrack(tuple);
    return tuple;
}

static void
objects_clear(Objects *objects)
{
    for (Py_ssize_t i = 0; i < objects->count; i++) {
        Py_DECREF(objects->items[i]);
    }
    objects->count = 0;
}

static void
objects_free(Objects *objects)
{
    objects_clear(objects);
    PyMem_Free(objects->items);
    objects->items = NULL;
    objects->capacity = 0;
}

/* What a record holds once read: its key indexes (and where each was read, for a message). */
typedef struct {
    uint64_t pk, ehk;
    Py_ssize_t pk_at, ehk_at; /* ehk_at < 0: no explicit hash key */
} Indexes;

/* A key table entry: where its bytes are. */
typedef struct {
    Py_ssize_t at, length;
} Span;

typedef struct {
    Indexes *records;
    Py_ssize_t n_records, records_capacity;
    Span *tables[2]; /* partition keys, explicit hash keys */
    Py_ssize_t n_table[2], table_capacity[2];
    PyObject *datas;     /* list of bytes */
    PyObject *tags;      /* list of tuples, from the first record with tags on; else NULL */
    Objects record_tags; /* the record being read */
    LastTag last_tag;    /* of any record so far (its Tag is in tags or record_tags) */
    PyObject *empty;     /* () */
} Body;

static int
grow(void **items, Py_ssize_t *capacity, Py_ssize_t count, size_t size)
{
    if (count < *capacity) {
        return OK;
    }
    Py_ssize_t more = *capacity ? *capacity * 2 : 64;
    void *grown = PyMem_Realloc(*items, (size_t)more * size);
    if (grown == NULL) {
        PyErr_NoMemory();
        return ERROR;
    }
    *items = grown;
    *capacity = more;
    return OK;
}

/* Parse the Record in buf[pos:stop] (decoder._parse_record), appending it to the body. */
static int
parse_record(const Input *in, Body *body, Py_ssize_t pos, Py_ssize_t stop, Py_ssize_t start)
{
    Indexes indexes = {0, 0, -1, -1};
    Py_ssize_t data_at = -1, data_end = -1;
    uint64_t tag, length;
    int status;
    while (pos < stop) {
        Py_ssize_t field_start = pos;
        if ((status = read_tag(in, &pos, &tag)) != OK) {
            return status;
        }
        if (tag == 0x08) {
            indexes.pk_at = pos;
            if ((status = read_varint(in, &pos, &indexes.pk)) != OK) {
                return status;
            }
        }
        else if (tag == 0x1A) {
            if ((status = read_varint(in, &pos, &length)) != OK) {
                return status;
            }
            Py_ssize_t end = advance(pos, length);
            if (end > stop) {
                PyErr_Format(format_error,
                             PREFIX "data of the record at byte %zd runs past the end of the "
                                    "record",
                             start);
                return ERROR;
            }
            data_at = pos;
            data_end = end;
            pos = end;
        }
        else if (tag == 0x10) {
            indexes.ehk_at = pos;
            if ((status = read_varint(in, &pos, &indexes.ehk)) != OK) {
                return status;
            }
        }
        else if (tag == 0x22) {
            if ((status = read_varint(in, &pos, &length)) != OK) {
                return status;
            }
            Py_ssize_t end = advance(pos, length);
            if (end > stop) {
                PyErr_Format(format_error,
                             PREFIX "a tag of the record at byte %zd runs past the end of the "
                                    "record",
                             start);
                return ERROR;
            }
            PyObject *item = parse_tag(in, pos, end, start, &body->last_tag, &status);
            if (item == NULL || objects_append(&body->record_tags, item) != OK) {
                return item == NULL ? status : ERROR;
            }
            pos = end;
        }
        else if ((status = skip_field(in, &pos, stop, tag, field_start, start)) != OK) {
            return status;
        }
    }
    if (pos != stop) {
        PyErr_Format(format_error,
                     PREFIX "a field of the record at byte %zd runs past the end of the record",
                     start);
        return ERROR;
    }
    if (indexes.pk_at < 0) {
        PyErr_Format(format_error,
                     PREFIX "record at byte %zd has no partition_key_index (a required field)",
                     start);
        return ERROR;
    }
    if (data_at < 0) {
        PyErr_Format(format_error, PREFIX "record at byte %zd has no data (a required field)",
                     start);
        return ERROR;
    }
    /* The record is whole: append its columns. */
    PyObject *data = PyBytes_FromStringAndSize((const char *)in->buf + data_at, data_end - data_at);
    if (data == NULL) {
        return ERROR;
    }
    status = PyList_Append(body->datas, data);
    Py_DECREF(data);
    if (status < 0) {
        return ERROR;
    }
    if (body->record_tags.count || body->tags) {
        if (body->tags == NULL) { /* the first record with tags: () for every one before */
            body->tags = PyList_New(body->n_records);
            if (body->tags == NULL) {
                return ERROR;
            }
            for (Py_ssize_t i = 0; i < body->n_records; i++) {
                PyList_SET_ITEM(body->tags, i, Py_NewRef(body->empty));
            }
        }
        PyObject *tags = body->record_tags.count ? objects_take_tuple(&body->record_tags)
                                                  : Py_NewRef(body->empty);
        if (tags == NULL) {
            return ERROR;
        }
        status = PyList_Append(body->tags, tags);
        Py_DECREF(tags);
        if (status < 0) {
            return ERROR;
        }
    }
    if (grow((void **)&body->records, &body->records_capacity, body->n_records,
             sizeof(Indexes)) != OK) {
        return ERROR;
    }
    body->records[body->n_records++] = indexes;
    return OK;
}

/* A key table's entries, decoded (decoder._decode_table): a new list, or NULL. */
static PyObject *
decode_table(const Input *in, const Span *entries, Py_ssize_t count, const char *what)
{
    PyObject *keys = PyList_New(count);
    if (keys == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key =
            PyUnicode_DecodeUTF8((const char *)in->buf + entries[i].at, entries[i].length, NULL);
        if (key == NULL) {
            Py_DECREF(keys);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                PyErr_Format(format_error, PREFIX "%s table entry %zd is not valid UTF-8", what,
                             i);
            }
            return NULL;
        }
        PyList_SET_ITEM(keys, i, key);
    }
    return keys;
}

/* Raise for the first record whose index (partition key: which 0, else explicit hash key) is
 * outside its table, if any (decoder._raise_bad_index): ERROR if it raised, else OK. */
static int
check_indexes(const Input *in, const Body *body, int which, Py_ssize_t table_size)
{
    const char *what = which == 0 ? "partition key" : "explicit hash key";
    for (Py_ssize_t i = 0; i < body->n_records; i++) {
        const Indexes *record = &body->records[i];
        Py_ssize_t at = which == 0 ? record->pk_at : record->ehk_at;
        uint64_t index = which == 0 ? record->pk : record->ehk;
        if (at >= 0 && index >= (uint64_t)table_size) {
            PyObject *value = varint_object(in, at);
            if (value != NULL) {
                PyErr_Format(format_error,
                             PREFIX "record %zd refers to %s %S, but the %s table has %zd %s", i,
                             what, value, what, table_size, table_size == 1 ? "entry" : "entries");
                Py_DECREF(value);
            }
            return ERROR;
        }
    }
    return OK;
}

/* The records' partition keys and explicit hash keys (None: the records have none), from the
 * decoded tables: new lists in *keys and *hash_keys. */
static int
key_columns(const Body *body, PyObject *partition_keys, PyObject *hash_keys_table,
            PyObject **keys, PyObject **hash_keys)
{
    int any_hash_key = 0;
    *keys = PyList_New(body->n_records);
    if (*keys == NULL) {
        return ERROR;
    }
    for (Py_ssize_t i = 0; i < body->n_records; i++) {
        const Indexes *record = &body->records[i];
        PyList_SET_ITEM(*keys, i, Py_NewRef(PyList_GET_ITEM(partition_keys, record->pk)));
        any_hash_key |= record->ehk_at >= 0;
    }
    if (!any_hash_key) {
        *hash_keys = Py_NewRef(Py_None);
        return OK;
    }
    *hash_keys = PyList_New(body->n_records);
    if (*hash_keys == NULL) {
        Py_CLEAR(*keys);
        return ERROR;
    }
    for (Py_ssize_t i = 0; i < body->n_records; i++) {
        const Indexes *record = &body->records[i];
        PyObject *key = record->ehk_at >= 0 ? PyList_GET_ITEM(hash_keys_table, record->ehk)
                                            : Py_None;
        PyList_SET_ITEM(*hash_keys, i, Py_NewRef(key));
    }
    return OK;
}

/* The body's loop (decoder._parse_general's): the records and the key tables' spans. */
static int
parse_fields(const Input *in, Body *body, Py_ssize_t pos, Py_ssize_t end)
{
    uint64_t tag, length;
    int status;
    while (pos < end) {
        Py_ssize_t start = pos;
        if ((status = read_tag(in, &pos, &tag)) != OK) {
            return status;
        }
        if (tag == 0x1A || tag == 0x0A || tag == 0x12) {
            if ((status = read_varint(in, &pos, &length)) != OK) {
                return status;
            }
            Py_ssize_t stop = advance(pos, length);
            if (stop > end) {
                PyErr_Format(format_error,
                             tag == 0x1A ? PREFIX "record at byte %zd runs past the end of the body"
                                         : PREFIX "key table entry at byte %zd runs past the end "
                                                  "of the body",
                             start);
                return ERROR;
            }
            if (tag == 0x1A) {
                if ((status = parse_record(in, body, pos, stop, start)) != OK) {
                    return status;
                }
            }
            else {
                int which = tag == 0x12;
                if (grow((void **)&body->tables[which], &body->table_capacity[which],
                         body->n_table[which], sizeof(Span)) != OK) {
                    return ERROR;
                }
                body->tables[which][body->n_table[which]++] = (Span){pos, stop - pos};
            }
            pos = stop;
        }
        else if ((status = skip_field(in, &pos, end, tag, start, -1)) != OK) {
            return status;
        }
    }
    return OK;
}

static PyObject *
build_columns(const Input *in, Body *body)
{
    PyObject *partition_keys = NULL, *hash_keys_table = NULL, *keys = NULL, *hash_keys = NULL;
    PyObject *result = NULL;
    partition_keys = decode_table(in, body->tables[0], body->n_table[0], "partition key");
    if (partition_keys == NULL) {
        goto done;
    }
    hash_keys_table = decode_table(in, body->tables[1], body->n_table[1], "explicit hash key");
    if (hash_keys_table == NULL) {
        goto done;
    }
    if (check_indexes(in, body, 0, body->n_table[0]) != OK ||
        check_indexes(in, body, 1, body->n_table[1]) != OK) {
        goto done;
    }
    if (key_columns(body, partition_keys, hash_keys_table, &keys, &hash_keys) != OK) {
        goto done;
    }
    result = PyTuple_Pack(4, keys, body->datas, hash_keys, body->tags ? body->tags : Py_None);
done:
    Py_XDECREF(partition_keys);
    Py_XDECREF(hash_keys_table);
    Py_XDECREF(keys);
    Py_XDECREF(hash_keys);
    return result;
}

PyDoc_STRVAR(parse_body_doc,
             "parse_body(buf, pos, end, /)\n--\n\n"
             "Parse the AggregatedRecord in buf[pos:end], as decoder._parse_general does.\n\n"
             "Returns the columns (partition keys, data, explicit hash keys or None, tags or "
             "None);\nraises AggregationFormatError, naming what is wrong, for a malformed body.");

static PyObject *
parse_body(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "parse_body(buf: bytes, pos: int, end: int)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    if ((pos == -1 || end == -1) && PyErr_Occurred()) {
        return NULL;
    }
    Input in = {(const uint8_t *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0])};
    if (pos < 0 || end > in.size || pos > end) {
        PyErr_SetString(PyExc_ValueError, "parse_body: pos and end must lie inside buf");
        return NULL;
    }
    Body body = {0};
    PyObject *result = NULL;
    body.empty = PyTuple_New(0);
    body.datas = PyList_New(0);
    if (body.empty && body.datas) {
        int status = parse_fields(&in, &body, pos, end);
        if (status == OK) {
            result = build_columns(&in, &body);
        }
        else if (status == OFF_END) { /* the Python parser's IndexError handler */
            PyErr_SetString(format_error,
                            PREFIX "truncated (a field runs past the end of the data)");
        }
    }
    objects_free(&body.record_tags);
    PyMem_Free(body.records);
    PyMem_Free(body.tables[0]);
    PyMem_Free(body.tables[1]);
    Py_XDECREF(body.datas);
    Py_XDECREF(body.tags);
    Py_XDECREF(body.empty);
    return result;
}

PyDoc_STRVAR(decode_tags_doc,
             "decode_tags(encoded, /)\n--\n\n"
             "The tags in a run of Record.tags fields, as decoder.decode_tags reads them.");

static PyObject *
decode_tags(PyObject *module, PyObject *encoded)
{
    if (!PyBytes_Check(encoded)) {
        PyErr_SetString(PyExc_TypeError, "decode_tags(encoded: bytes)");
        return NULL;
    }
    Input in = {(const uint8_t *)PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded)};
    Objects tags = {0};
    LastTag last_tag = {0};
    Py_ssize_t pos = 0, stop = in.size;
    uint64_t length;
    int status = OK;
    while (status == OK && pos < stop) {
        Py_ssize_t start = pos;
        if (in.buf[pos] != 0x22) {
            PyErr_Format(format_error, "not an encoded tag at byte %zd", pos);
            status = ERROR;
        }
        else if ((status = read_varint(&in, (pos += 1, &pos), &length)) == OK) {
            Py_ssize_t end = advance(pos, length);
            if (end > stop) {
                PyErr_Format(format_error, "the tag at byte %zd runs past the end", start);
                status = ERROR;
            }
            else {
                PyObject *tag = parse_tag(&in, pos, end, 0, &last_tag, &status);
                if (tag != NULL) {
                    status = objects_append(&tags, tag);
                }
                pos = end;
            }
        }
    }
    PyObject *result = NULL;
    if (status == OK) {
        result = objects_take_tuple(&tags);
    }
    else if (status == OFF_END) { /* a varint cut off by the end: nothing pads what follows */
        PyErr_Format(format_error, "a tag is cut off at byte %zd", stop);
    }
    objects_free(&tags);
    return result;
}

/* Record i of the columns (see records), as tuple.__new__(type, row) would make it, minus the
 * work a decoded record costs the collector: a named tuple is never untracked by CPython (it
 * untracks only exact tuples, as it meets them), so a program that keeps a million decoded
 * records paid for collections that walked them all, more than the decoding itself. A record is left
 * untracked when each of its items is either not a container the collector knows or an exact
 * tuple it already does not follow (CPython's own rule for tuples, _PyTuple_MaybeUntrack):
 * strings, bytes, numbers, None, datetimes and the tuples of tags made here. */
static PyObject *
record_at(PyTypeObject *type, PyObject *fields, unsigned long varying, Py_ssize_t i)
{
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    /* Allocated untracked and unzeroed: every item is set below, before anything else can
     * run, and the record is tracked only if it may be part of a cycle. */
    PyObject *result = (PyObject *)PyObject_GC_NewVar(PyTupleObject, type, n);
    if (result == NULL) {
        return NULL;
    }
    int in_no_cycle = 1;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *item = PyTuple_GET_ITEM(fields, j);
        if ((varying >> j) & 1) { /* checked by records: a list or tuple of enough items, or */
            if (PyList_CheckExact(item)) {
                item = Py_NewRef(PyList_GET_ITEM(item, i));
            }
            else if (PyTuple_CheckExact(item)) {
                item = Py_NewRef(PyTuple_GET_ITEM(item, i));
            }
            else { /* an int to number the records from */
                item = PyLong_FromSsize_t(PyLong_AsSsize_t(item) + i);
                if (item == NULL) {
                    for (Py_ssize_t k = j; k < n; k++) {
                        PyTuple_SET_ITEM(result, k, Py_NewRef(Py_None));
                    }
                    Py_DECREF(result);
                    return NULL;
                }
            }
        }
        else {
            Py_INCREF(item);
        }
        if (PyObject_IS_GC(item) && !(PyTuple_CheckExact(item) && !PyObject_GC_IsTracked(item))) {
            in_no_cycle = 0;
        }
        PyTuple_SET_ITEM(result, j, item);
    }
#if PY_VERSION_HEX >= 0x030E0000
    ((PyTupleObject *)result)->ob_hash = -1; /* as in parse_tag */
#endif
    if (!in_no_cycle) {
        PyObject_GC_Track(result);
    }
    return result;
}

PyDoc_STRVAR(records_doc,
             "records(cls, count, fields, varying, /)\n--\n\n"
             "A list of count tuples of cls (a named tuple): field j of record i is "
             "fields[j][i]\nwhere bit j of varying is set (fields[j] + i if fields[j] is an "
             "int), else fields[j].\nEach is left untracked by the garbage collector when "
             "nothing in it can be part of\na cycle.");

/* What decode and deaggregate build from the columns, in one loop: the records as record_at
 * makes each (zip and map over the columns cost a Python-level step per record, three times
 * what the parse did on records of a few bytes). */
static PyObject *
records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_CheckExact(args[2]) || !PyLong_Check(args[1]) ||
        !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "records(cls, count: int, fields: tuple, varying: int)");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    unsigned long varying = PyLong_AsUnsignedLong(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) ||
        ((PyTypeObject *)args[0])->tp_basicsize != PyTuple_Type.tp_basicsize ||
        ((PyTypeObject *)args[0])->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_SetString(PyExc_TypeError,
                        "records: cls must be a tuple type with no fields of its own (a named "
                        "tuple)");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    PyObject *fields = args[2];
    Py_ssize_t n_fields = PyTuple_GET_SIZE(fields);
    if (count < 0 || n_fields > 32) {
        PyErr_SetString(PyExc_ValueError, "records: count < 0, or more than 32 fields");
        return NULL;
    }
    /* The varying fields must be lists or tuples of at least count items, or ints whose
     * count numbers fit. */
    for (Py_ssize_t j = 0; j < n_fields; j++) {
        PyObject *field = PyTuple_GET_ITEM(fields, j);
        if (!((varying >> j) & 1)) {
            continue;
        }
        if (PyLong_CheckExact(field)) {
            Py_ssize_t first = PyLong_AsSsize_t(field);
            if (first == -1 && PyErr_Occurred()) {
                return NULL;
            }
            if (first < 0 || first > PY_SSIZE_T_MAX - count) {
                PyErr_Format(PyExc_ValueError, "records: field %zd numbers out of range", j);
                return NULL;
            }
        }
        else if (!(PyList_CheckExact(field) || PyTuple_CheckExact(field)) ||
                 Py_SIZE(field) < count) {
            PyErr_Format(PyExc_ValueError,
                         "records: field %zd is not a list or tuple of %zd items, nor an int",
                         j, count);
            return NULL;
        }
    }
    PyObject *out = PyList_New(count);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *record = record_at(type, fields, varying, i);
        if (record == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, record);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"records", (PyCFunction)(void (*)(void))records, METH_FASTCALL, records_doc},
    {"parse_body", (PyCFunction)(void (*)(void))parse_body, METH_FASTCALL, parse_body_doc},
    {"decode_tags", (PyCFunction)decode_tags, METH_O, decode_tags_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "aiokpl._core._cdecoder",
    "The aggregation format's decoder in C (see decoder.py).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

static PyObject *
attribute_of(const char *module_name, const char *name)
{
    PyObject *module = PyImport_ImportModule(module_name);
    if (module == NULL) {
        return NULL;
    }
    PyObject *value = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    return value;
}

PyMODINIT_FUNC
PyInit__cdecoder(void)
{
    format_error = attribute_of("aiokpl._core.errors", "AggregationFormatError");
    tag_type = format_error ? attribute_of("aiokpl._core.wire", "Tag") : NULL;
    if (tag_type == NULL) {
        return NULL;
    }
    if (!PyType_Check(tag_type) || !PyType_IsSubtype((PyTypeObject *)tag_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "aiokpl._core.wire.Tag is not a tuple type");
        return NULL;
    }
    return PyModule_Create(&module_def);
}
