/* safetensors.h — reading (memory-mapped) and writing .safetensors files.
 *
 * The format: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
 * {...}}), then the tensor bytes, offsets relative to the end of the header.
 * st_open maps the file and checks every entry (dtype known, offsets inside
 * the file, size = elements x dtype size) so a reader may trust what it finds;
 * errors name the file and the tensor. The data stays mapped until st_close.
 * st_write converts f32 data to each tensor's dtype and writes a temp file
 * renamed into place, so a reader never sees half a file. */
#ifndef RH_SAFETENSORS_H
#define RH_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef enum st_dtype {
    ST_F32 = 0,
    ST_F16,
    ST_BF16,
    ST_OTHER,        /* a valid safetensors dtype the engine does not compute with */
} st_dtype;

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    const char *name;
    st_dtype dtype;
    char dtype_name[8];          /* as written in the file: "F32", "BF16", "I8", ... */
    uint32_t ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    const void *data;            /* inside the mapping; may be unaligned */
    uint64_t nbytes;
} st_tensor;

typedef struct st_file {
    char *path;
    void *map;
    size_t map_len;
    st_tensor *tensors;
    size_t n;
    char *names;                 /* storage for the tensor names */
} st_file;

st_file *st_open(const char *path, rh_err *e);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
/* Converts a tensor's elements (f32, f16 or bf16) to f32. -1 for other dtypes. */
int st_read_f32(const st_tensor *t, float *out);

/* One tensor to write: f32 source data, stored as `dtype` (f32, f16 or bf16). */
typedef struct st_out {
    const char *name;
    st_dtype dtype;
    uint32_t ndim;
    uint64_t shape[ST_MAX_DIMS];
    const float *data;
} st_out;

int st_write(const char *path, const st_out *tensors, size_t n, rh_err *e);

const char *st_dtype_name(st_dtype d);
/* Parses "f32", "f16" or "bf16" (any case); -1 when unknown. */
int st_dtype_parse(const char *s, st_dtype *out);

#endif
