/* prefix.c — what the router reads of a request body: its prompt's chained
 * block hashes (cache-aware routing), its length, max_tokens and stream
 * flag. See proxy.h for the hashing rules. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "router/proxy.h"
#include "traces/prompt.h"

int rp_api_of_path(const char *path)
{
    if (!strcmp(path, "/v1/completions")) return RP_COMPLETIONS;
    if (!strcmp(path, "/v1/chat/completions")) return RP_CHAT;
    if (!strcmp(path, "/generate")) return RP_GENERATE;
    return -1;
}

uint32_t rp_hash_text(const char *s, size_t n, uint32_t block, uint64_t *out, uint32_t cap)
{
    if (!block) return 0;
    uint64_t prev = RP_SEED_TEXT;
    uint32_t k = 0;
    for (size_t at = 0; at + block <= n && k < cap; at += block) {
        prev = XXH3_64bits_withSeed(s + at, block, prev);
        out[k++] = prev;
    }
    return k;
}

/* Growing text: the chat messages joined. */
typedef struct tbuf {
    char *p;
    size_t n, cap;
    int oom;
} tbuf;

static void tput(tbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 1024;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

/* "ROLE: CONTENT\n" per message; content a string, or parts of type text. */
static void chat_text(json_t *messages, tbuf *b)
{
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role) tput(b, role, strlen(role));
        tput(b, ": ", 2);
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) tput(b, json_string_value(c), json_string_length(c));
        else if (json_is_array(c)) {
            size_t j;
            json_t *part;
            json_array_foreach(c, j, part) {
                json_t *t = json_object_get(part, "text");
                const char *type = json_string_value(json_object_get(part, "type"));
                if (json_is_string(t) && (!type || !strcmp(type, "text"))) tput(b, json_string_value(t), json_string_length(t));
            }
        }
        tput(b, "\n", 1);
    }
}

/* An array of integers (token ids)? */
static int is_ids(json_t *a)
{
    if (!json_is_array(a) || json_array_size(a) == 0) return 0;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) if (!json_is_integer(v)) return 0;
    return 1;
}

static int hash_ids(json_t *a, uint32_t block, rp_prompt *out)
{
    size_t n = json_array_size(a);
    if (n > TR_MAX_TOKENS) n = TR_MAX_TOKENS;
    out->by_ids = 1;
    out->length = (uint32_t)n;
    uint32_t blocks = block ? (uint32_t)(n / block) : 0;
    if (!blocks) return 0;
    int32_t *ids = malloc(n * sizeof *ids);
    out->hashes = malloc(blocks * sizeof *out->hashes);
    if (!ids || !out->hashes) {
        free(ids);
        free(out->hashes);
        out->hashes = NULL;
        return -1;
    }
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(a, i));
    out->n_hashes = tr_prompt_block_hashes(ids, (uint32_t)n, block, RP_SEED_IDS, out->hashes);
    free(ids);
    return 0;
}

static int hash_text(const char *s, size_t n, uint32_t block, rp_prompt *out)
{
    out->length = n > TR_MAX_TOKENS ? TR_MAX_TOKENS : (uint32_t)n;
    uint32_t blocks = block ? (uint32_t)(n / block) : 0;
    if (!blocks) return 0;
    if (!(out->hashes = malloc(blocks * sizeof *out->hashes))) return -1;
    out->n_hashes = rp_hash_text(s, n, block, out->hashes, blocks);
    return 0;
}

static uint32_t count_of(json_t *v)
{
    if (!json_is_integer(v)) return 0;
    json_int_t k = json_integer_value(v);
    return k <= 0 ? 0 : k > TR_MAX_TOKENS ? TR_MAX_TOKENS : (uint32_t)k;
}

int rp_prompt_read(int api, const char *body, size_t n, uint32_t block, rp_prompt *out)
{
    memset(out, 0, sizeof *out);
    out->max_tokens = 16;
    json_t *root = json_loadb(body, n, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return 0;
    }
    out->stream = json_is_true(json_object_get(root, "stream"));
    uint32_t mt = api == RP_GENERATE ? count_of(json_object_get(json_object_get(root, "sampling_params"), "max_new_tokens"))
                                     : count_of(json_object_get(root, "max_tokens"));
    if (!mt && api == RP_CHAT) mt = count_of(json_object_get(root, "max_completion_tokens"));
    if (mt) out->max_tokens = mt;
    int rc = 0;
    if (api == RP_CHAT) {
        json_t *msgs = json_object_get(root, "messages");
        if (json_is_array(msgs)) {
            tbuf b = {0};
            chat_text(msgs, &b);
            rc = b.oom ? -1 : hash_text(b.p ? b.p : "", b.n, block, out);
            free(b.p);
        }
    } else {
        json_t *p = api == RP_GENERATE ? json_object_get(root, "input_ids") : json_object_get(root, "prompt");
        if (api == RP_GENERATE && !p) p = json_object_get(root, "text");
        /* a batch: its first prompt */
        if (json_is_array(p) && !is_ids(p) && json_array_size(p)) p = json_array_get(p, 0);
        if (is_ids(p)) rc = hash_ids(p, block, out);
        else if (json_is_string(p)) rc = hash_text(json_string_value(p), json_string_length(p), block, out);
    }
    json_decref(root);
    return rc;
}

void rp_prompt_free(rp_prompt *p)
{
    free(p->hashes);
    p->hashes = NULL;
    p->n_hashes = 0;
}

uint32_t rp_prompt_hashes(int api, const char *body, size_t n, uint32_t block, uint64_t *out, uint32_t cap)
{
    rp_prompt p;
    if (rp_prompt_read(api, body, n, block, &p) < 0) return 0;
    uint32_t k = p.n_hashes < cap ? p.n_hashes : cap;
    if (k) memcpy(out, p.hashes, k * sizeof *out);
    rp_prompt_free(&p);
    return k;
}

int rp_trace_worker(const tr_request *r)
{
    uint32_t w = r->flags >> RP_TRACE_WORKER_SHIFT;
    return w ? (int)w - 1 : -1;
}
