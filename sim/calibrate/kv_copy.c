/* kv_copy.c — timing the host KV tier's page copies (CT_KV_COPY): for n
 * tokens, their pages of every layer's K and V copied out of backend memory
 * into host memory, one copy a page a layer a tensor, as runner_copy_pages
 * makes them (engine/model/runner.h). Copies in run the same sizes the
 * other way; one direction is what the table prices per token copied. */
#include <stdlib.h>

#include "sim/calibrate/internal.h"
#include "sim/cost/cost_table.h"

typedef struct copy_bench {
    calib_ctx *x;
    const calib_grid *g;
    uint32_t pages;                 /* at this grid point */
    size_t page_bytes;              /* one layer's K (or V) page */
    void *dev;                      /* the largest point's pages, backend memory */
    char *host;                     /* as many, host memory */
} copy_bench;

static int copy_set(void *p, uint32_t i)
{
    copy_bench *b = p;
    uint32_t ps = b->x->s.page_size;
    b->pages = (uint32_t)((b->g->ax0[i] + ps - 1) / ps);
    return 0;
}

static double copy_sample(void *p, uint32_t iters, double *spent)
{
    copy_bench *b = p;
    const kern_table *K = b->x->b->K;
    uint32_t L = b->x->s.layers;
    double t0 = calib_now(b->x);
    for (uint32_t it = 0; it < iters; it++)
        for (uint32_t pg = 0; pg < b->pages; pg++)
            for (uint32_t l = 0; l < L; l++)
                for (int kv = 0; kv < 2; kv++)   /* K, then V */
                    K->copy_out(b->host + (size_t)pg * b->page_bytes, (char *)b->dev + (size_t)pg * b->page_bytes,
                                b->page_bytes);
    calib_sync(b->x);
    *spent = calib_now(b->x) - t0;
    return *spent;
}

int calib_bench_kv_copy(calib_ctx *x, calib_grid *g, rh_err *e)
{
    copy_bench b = {.x = x, .g = g};
    b.page_bytes = (size_t)x->s.page_size * x->s.kvd * kern_dtype_size(x->b->K->kv_dtype);
    uint32_t most = 0;
    for (uint32_t i = 0; i < g->n0; i++) {
        uint32_t pages = (uint32_t)((g->ax0[i] + x->s.page_size - 1) / x->s.page_size);
        if (pages > most) most = pages;
    }
    b.host = malloc((size_t)most * b.page_bytes);
    b.dev = calib_random(x, (size_t)most * b.page_bytes / sizeof(float) + 1, 1.0f);
    int rc = b.host && b.dev ? calib_grid_measure(x, g, copy_set, copy_sample, &b, e)
                             : rh_fail(e, "calibrate: kv_copy: out of memory");
    free(b.host);
    calib_free(x, b.dev);
    return rc;
}
