/* header.c — the trace header: typed fields plus free key/values.
 *
 * Strings are always owned and never NULL, so readers of tr_header can print
 * h->model without checking; an allocation failure reports -1 instead. */
#include "traces/trace.h"

#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s)
{
    size_t n = strlen(s ? s : "");
    char *d = malloc(n + 1);
    if (d) memcpy(d, s ? s : "", n + 1);
    return d;
}

void tr_header_init(tr_header *h)
{
    memset(h, 0, sizeof *h);
    h->version = TR_FORMAT_VERSION;
    h->model = dup_str("");
    h->hardware = dup_str("");
}

void tr_header_free(tr_header *h)
{
    if (!h) return;
    free(h->model);
    free(h->hardware);
    for (uint32_t i = 0; i < h->n_kv; i++) {
        free(h->kv[i].key);
        free(h->kv[i].value);
    }
    free(h->kv);
    memset(h, 0, sizeof *h);
}

static int replace_str(char **slot, const char *s)
{
    char *d = dup_str(s);
    if (!d) return -1;
    free(*slot);
    *slot = d;
    return 0;
}

int tr_header_set_model(tr_header *h, const char *model)
{
    return replace_str(&h->model, model);
}

int tr_header_set_hardware(tr_header *h, const char *hw)
{
    return replace_str(&h->hardware, hw);
}

const char *tr_header_get(const tr_header *h, const char *key)
{
    for (uint32_t i = 0; i < h->n_kv; i++)
        if (!strcmp(h->kv[i].key, key)) return h->kv[i].value;
    return NULL;
}

int tr_header_set(tr_header *h, const char *key, const char *value)
{
    for (uint32_t i = 0; i < h->n_kv; i++)
        if (!strcmp(h->kv[i].key, key)) return replace_str(&h->kv[i].value, value);
    tr_kv *kv = realloc(h->kv, (h->n_kv + 1) * sizeof *kv);
    if (!kv) return -1;
    h->kv = kv;
    char *k = dup_str(key), *v = dup_str(value);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    kv[h->n_kv].key = k;
    kv[h->n_kv].value = v;
    h->n_kv++;
    return 0;
}

int tr_header_copy(tr_header *dst, const tr_header *src)
{
    tr_header_init(dst);
    dst->version = src->version;
    dst->block_size = src->block_size;
    if (!dst->model || !dst->hardware || tr_header_set_model(dst, src->model) < 0 ||
        tr_header_set_hardware(dst, src->hardware) < 0)
        goto fail;
    for (uint32_t i = 0; i < src->n_kv; i++)
        if (tr_header_set(dst, src->kv[i].key, src->kv[i].value) < 0) goto fail;
    return 0;
fail:
    tr_header_free(dst);
    return -1;
}
