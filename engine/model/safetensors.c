/* safetensors.c — see safetensors.h. */
#include "engine/model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/half.h"
#include "util/atomic_file.h"

/* A header larger than this is not a weights file (the reference
 * implementation caps it at 100 MB too). */
#define ST_MAX_HEADER (100u << 20)

static const struct { const char *name; st_dtype dtype; unsigned size; } dtypes[] = {
    {"F32", ST_F32, 4},     {"F16", ST_F16, 2},     {"BF16", ST_BF16, 2},   {"F64", ST_OTHER, 8},
    {"I64", ST_OTHER, 8},   {"U64", ST_OTHER, 8},   {"I32", ST_OTHER, 4},   {"U32", ST_OTHER, 4},
    {"I16", ST_OTHER, 2},   {"U16", ST_OTHER, 2},   {"I8", ST_OTHER, 1},    {"U8", ST_OTHER, 1},
    {"BOOL", ST_OTHER, 1},  {"F8_E4M3", ST_OTHER, 1}, {"F8_E5M2", ST_OTHER, 1},
};

const char *st_dtype_name(st_dtype d)
{
    return d == ST_F32 ? "F32" : d == ST_F16 ? "F16" : d == ST_BF16 ? "BF16" : "other";
}

int st_dtype_parse(const char *s, st_dtype *out)
{
    if (!strcasecmp(s, "f32") || !strcasecmp(s, "float32")) *out = ST_F32;
    else if (!strcasecmp(s, "f16") || !strcasecmp(s, "float16")) *out = ST_F16;
    else if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16")) *out = ST_BF16;
    else return -1;
    return 0;
}

void st_close(st_file *f)
{
    if (!f) return;
    if (f->map && f->map != MAP_FAILED) munmap(f->map, f->map_len);
    free(f->tensors);
    free(f->names);
    free(f->path);
    free(f);
}

static int fail_close(st_file *f, json_t *h)
{
    json_decref(h);
    st_close(f);
    return -1;
}

/* Checks one header entry and fills t. `data` is the start of the tensor area. */
static int parse_entry(const char *path, const char *name, json_t *v, const uint8_t *data, uint64_t data_len,
                       st_tensor *t, rh_err *e)
{
    if (!json_is_object(v)) return rh_fail(e, "%s: tensor '%s': expected an object", path, name);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"), *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt)) return rh_fail(e, "%s: tensor '%s': field 'dtype' is missing", path, name);
    unsigned esize = 0;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(json_string_value(dt), dtypes[i].name)) {
            t->dtype = dtypes[i].dtype;
            esize = dtypes[i].size;
            snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dtypes[i].name);
        }
    if (!esize) return rh_fail(e, "%s: tensor '%s': unknown dtype '%s'", path, name, json_string_value(dt));
    if (!json_is_array(sh) || json_array_size(sh) > ST_MAX_DIMS)
        return rh_fail(e, "%s: tensor '%s': field 'shape' must be a list of at most %d sizes", path, name, ST_MAX_DIMS);
    t->ndim = (uint32_t)json_array_size(sh);
    uint64_t numel = 1;
    for (uint32_t i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(sh, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return rh_fail(e, "%s: tensor '%s': field 'shape': entry %u is not a size", path, name, i);
        t->shape[i] = (uint64_t)json_integer_value(d);
        if (t->shape[i] && numel > UINT64_MAX / 8 / t->shape[i])
            return rh_fail(e, "%s: tensor '%s': field 'shape' is too large", path, name);
        numel *= t->shape[i];
    }
    t->numel = numel;
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(json_array_get(off, 0)) ||
        !json_is_integer(json_array_get(off, 1)))
        return rh_fail(e, "%s: tensor '%s': field 'data_offsets' must be [begin, end]", path, name);
    json_int_t b = json_integer_value(json_array_get(off, 0)), en = json_integer_value(json_array_get(off, 1));
    if (b < 0 || en < b || (uint64_t)en > data_len)
        return rh_fail(e, "%s: tensor '%s': field 'data_offsets' [%lld, %lld] is outside the %llu data bytes", path,
                       name, (long long)b, (long long)en, (unsigned long long)data_len);
    t->nbytes = (uint64_t)(en - b);
    if (t->nbytes != numel * esize)
        return rh_fail(e, "%s: tensor '%s': field 'data_offsets' spans %llu bytes but the shape needs %llu", path, name,
                       (unsigned long long)t->nbytes, (unsigned long long)(numel * esize));
    t->data = data + b;
    return 0;
}

st_file *st_open(const char *path, rh_err *e)
{
    st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        rh_fail(e, "%s: out of memory", path);
        return NULL;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        rh_fail(e, "%s: %s", path, strerror(errno));
        st_close(f);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rh_fail(e, "%s: not a regular file", path);
        close(fd);
        st_close(f);
        return NULL;
    }
    f->map_len = (size_t)st.st_size;
    if (f->map_len < 8) {
        rh_fail(e, "%s: %zu bytes is too short for a safetensors file", path, f->map_len);
        close(fd);
        st_close(f);
        return NULL;
    }
    f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        rh_fail(e, "%s: cannot map the file: %s", path, strerror(errno));
        st_close(f);
        return NULL;
    }
    const uint8_t *bytes = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | bytes[i];
    if (hlen > ST_MAX_HEADER || hlen > f->map_len - 8) {
        rh_fail(e, "%s: header length %llu does not fit the %zu-byte file", path, (unsigned long long)hlen, f->map_len);
        st_close(f);
        return NULL;
    }
    json_error_t je;
    json_t *h = json_loadb((const char *)bytes + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!h) {
        rh_fail(e, "%s: header: %s (column %d)", path, je.text, je.column);
        st_close(f);
        return NULL;
    }
    if (!json_is_object(h)) {
        rh_fail(e, "%s: header: expected a JSON object", path);
        fail_close(f, h);
        return NULL;
    }
    size_t n = json_object_size(h), names_len = 0;
    const char *key;
    json_t *v;
    json_object_foreach(h, key, v) names_len += strlen(key) + 1;
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    f->names = malloc(names_len ? names_len : 1);
    if (!f->tensors || !f->names) {
        rh_fail(e, "%s: out of memory", path);
        fail_close(f, h);
        return NULL;
    }
    const uint8_t *data = bytes + 8 + hlen;
    uint64_t data_len = f->map_len - 8 - hlen;
    size_t at = 0;
    json_object_foreach(h, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        st_tensor *t = &f->tensors[f->n];
        size_t kl = strlen(key) + 1;
        memcpy(f->names + at, key, kl);
        t->name = f->names + at;
        at += kl;
        if (parse_entry(path, key, v, data, data_len, t, e)) {
            fail_close(f, h);
            return NULL;
        }
        f->n++;
    }
    json_decref(h);
    return f;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

int st_read_f32(const st_tensor *t, float *out)
{
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case ST_F32:
        memcpy(out, p, t->numel * 4);
        return 0;
    case ST_F16:
    case ST_BF16:
        for (uint64_t i = 0; i < t->numel; i++) {
            uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
            out[i] = t->dtype == ST_F16 ? rh_f16_to_f32(h) : rh_bf16_to_f32(h);
        }
        return 0;
    default:
        return -1;
    }
}

/* ---- writing ---------------------------------------------------------- */

static unsigned dtype_size(st_dtype d)
{
    return d == ST_F32 ? 4 : 2;
}

static uint64_t out_numel(const st_out *t)
{
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static int write_data(FILE *fp, const st_out *t)
{
    uint64_t n = out_numel(t);
    if (t->dtype == ST_F32) return fwrite(t->data, 4, n, fp) == n ? 0 : -1;
    uint8_t buf[8192];
    for (uint64_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < sizeof buf / 2 && i < n; k++, i++) {
            uint16_t h = t->dtype == ST_F16 ? rh_f32_to_f16(t->data[i]) : rh_f32_to_bf16(t->data[i]);
            buf[2 * k] = (uint8_t)h;
            buf[2 * k + 1] = (uint8_t)(h >> 8);
        }
        if (fwrite(buf, 2, k, fp) != k) return -1;
    }
    return 0;
}

int st_write(const char *path, const st_out *ts, size_t n, rh_err *e)
{
    json_t *h = json_object();
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (ts[i].dtype != ST_F32 && ts[i].dtype != ST_F16 && ts[i].dtype != ST_BF16) {
            json_decref(h);
            return rh_fail(e, "%s: tensor '%s': cannot write dtype %s", path, ts[i].name, st_dtype_name(ts[i].dtype));
        }
        json_t *shape = json_array();
        for (uint32_t d = 0; d < ts[i].ndim; d++) json_array_append_new(shape, json_integer((json_int_t)ts[i].shape[d]));
        uint64_t bytes = out_numel(&ts[i]) * dtype_size(ts[i].dtype);
        json_object_set_new(h, ts[i].name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", st_dtype_name(ts[i].dtype), "shape", shape,
                                      "data_offsets", (json_int_t)off, (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (!text) return rh_fail(e, "%s: out of memory", path);
    /* Pad the header with spaces to a multiple of 8 so f32 data is aligned
     * in the mapping and readers can use it in place. */
    size_t tl = strlen(text), hl = (tl + 7) / 8 * 8;
    rh_atomic_file af;
    if (rh_atomic_open(&af, path, e) < 0) {
        free(text);
        return -1;
    }
    FILE *fp = af.f;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    int bad = fwrite(len8, 1, 8, fp) != 8 || fwrite(text, 1, tl, fp) != tl;
    for (size_t i = tl; i < hl && !bad; i++) bad = fputc(' ', fp) == EOF;
    free(text);
    for (size_t i = 0; i < n && !bad; i++) bad = write_data(fp, &ts[i]) != 0;
    if (bad) {
        rh_atomic_abort(&af);
        return rh_fail(e, "%s: cannot write the file", path);
    }
    return rh_atomic_commit(&af, e);
}
