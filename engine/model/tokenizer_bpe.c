/* tokenizer_bpe.c — loading a Hugging Face tokenizer.json (BPE model) and
 * merging one pre-token.
 *
 * The merge loop is the classic one made O(n log n): symbols in a linked
 * list, candidate pairs in a min-heap keyed by (merge rank, position), stale
 * candidates skipped when popped. Merging the lowest rank first, leftmost
 * first among equals, is the rule the reference BPE follows, so the result
 * equals the naive "merge the best pair until none is left" loop. */
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/tokenizer_impl.h"

/* ---- bytes <-> printable code points (byte-level BPE) ------------------ */

/* Printable Latin-1 bytes stand for themselves; the 68 others (controls,
 * space, DEL, NBSP, soft hyphen...) take the code points from 256 up, in
 * byte order. The map is a bijection, so byte-level BPE is lossless. */
uint32_t tok_byte_to_cp(uint8_t b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    uint32_t n = 0;
    for (uint32_t x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) n++;
    return 256 + n;
}

static size_t put_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static uint32_t get_cp(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    if (n == 1) return u[0];
    if (n == 2) return (uint32_t)(u[0] & 0x1f) << 6 | (u[1] & 0x3f);
    if (n == 3) return (uint32_t)(u[0] & 0x0f) << 12 | (uint32_t)(u[1] & 0x3f) << 6 | (u[2] & 0x3f);
    return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3f) << 12 | (uint32_t)(u[2] & 0x3f) << 6 | (u[3] & 0x3f);
}

/* ---- merging ------------------------------------------------------------ */

typedef struct cand {
    uint32_t rank, left, right;
    int32_t lid, rid, merged;
} cand;

static int cand_less(const cand *a, const cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

typedef struct heap {
    cand *v;
    size_t n, cap;
} heap;

static int heap_push(heap *h, cand c)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 32;
        cand *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i && cand_less(&c, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
    return 0;
}

static cand heap_pop(heap *h)
{
    cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const cand *best = &last;
        if (l < h->n && cand_less(&h->v[l], best)) {
            m = l;
            best = &h->v[l];
        }
        if (l + 1 < h->n && cand_less(&h->v[l + 1], best)) m = l + 1;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static int push_pair(const tokenizer *t, heap *h, const int32_t *id, uint32_t l, uint32_t r)
{
    uint64_t v;
    if (id[l] < 0 || id[r] < 0) return 0;
    if (!rh_map64_get(&t->merges, (uint64_t)(uint32_t)id[l] << 32 | (uint32_t)id[r], &v)) return 0;
    return heap_push(h, (cand){(uint32_t)(v >> 32), l, r, id[l], id[r], (int32_t)(uint32_t)v});
}

int tok_bpe_word(const tokenizer *t, const char *s, size_t len, tok_out *o)
{
    if (!len) return 0;
    int64_t whole;
    char *mapped = NULL;
    if (t->ignore_merges) {
        /* Look the whole pre-token up as it is spelled in the vocabulary. */
        size_t ml = len;
        const char *key = s;
        if (t->kind == TOK_BPE_BYTELEVEL) {
            if (!(mapped = malloc(2 * len))) return -1;
            ml = 0;
            for (size_t i = 0; i < len; i++) ml += put_utf8(tok_byte_to_cp((uint8_t)s[i]), mapped + ml);
            key = mapped;
        }
        int found = rh_strmap_get(&t->vocab, key, ml, &whole);
        free(mapped);
        if (found) return tok_out_push(o, (int32_t)whole);
    }

    /* Initial symbols: bytes (byte-level) or characters (SentencePiece). */
    int32_t *id = malloc(len * sizeof *id);
    uint32_t *next = malloc(len * sizeof *next), *prev = malloc(len * sizeof *prev);
    uint32_t *start = malloc(len * sizeof *start), *slen = malloc(len * sizeof *slen);
    heap h = {0};
    int r = -1;
    if (!id || !next || !prev || !start || !slen) goto done;
    uint32_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = t->kind == TOK_BPE_BYTELEVEL ? 1 : tok_utf8_len(s + i, len - i);
        int64_t v = -1;
        if (t->kind == TOK_BPE_BYTELEVEL) v = t->byte_id[(uint8_t)s[i]];
        else if (!rh_strmap_get(&t->vocab, s + i, cl, &v)) v = -1;
        id[n] = (int32_t)v;
        start[n] = (uint32_t)i;
        slen[n] = (uint32_t)cl;
        prev[n] = n - 1;           /* UINT32_MAX for the first */
        next[n] = n + 1;
        n++;
        i += cl;
    }
    for (uint32_t i = 0; i + 1 < n; i++)
        if (push_pair(t, &h, id, i, i + 1)) goto done;
    while (h.n) {
        cand c = heap_pop(&h);
        /* Stale if either side has merged since: ids only ever grow into
         * longer tokens, so a matching id means the same symbol. */
        if (id[c.left] != c.lid || id[c.right] != c.rid || next[c.left] != c.right) continue;
        id[c.left] = c.merged;
        slen[c.left] += slen[c.right];
        id[c.right] = -2;          /* removed */
        next[c.left] = next[c.right];
        if (next[c.left] < n) prev[next[c.left]] = c.left;
        if (prev[c.left] < n && push_pair(t, &h, id, prev[c.left], c.left)) goto done;
        if (next[c.left] < n && push_pair(t, &h, id, c.left, next[c.left])) goto done;
    }
    r = 0;
    for (uint32_t i = 0; i < n && !r; i = next[i]) {
        if (id[i] >= 0) {
            r = tok_out_push(o, id[i]);
            continue;
        }
        /* A character without a token: its bytes' fallback tokens, else unk. */
        for (uint32_t b = 0; b < slen[i] && !r; b++) {
            int32_t fb = t->byte_id[(uint8_t)s[start[i] + b]];
            if (fb < 0 && t->unk < 0) r = TOK_UNENCODABLE;
            else if (fb < 0) r = tok_out_push(o, t->unk), b = slen[i];
            else r = tok_out_push(o, fb);
        }
    }
done:
    free(id);
    free(next);
    free(prev);
    free(start);
    free(slen);
    free(h.v);
    return r;
}

/* ---- loading tokenizer.json -------------------------------------------- */

static int has_type(json_t *o, const char *type)
{
    json_t *t = json_object_get(o, "type");
    return json_is_string(t) && !strcmp(json_string_value(t), type);
}

/* The component itself, or one of a Sequence's members, of a given type. */
static json_t *find_component(json_t *o, const char *type)
{
    if (!json_is_object(o)) return NULL;
    if (has_type(o, type)) return o;
    const char *lists[] = {"pretokenizers", "normalizers", "decoders", "processors"};
    for (size_t k = 0; k < 4; k++) {
        json_t *arr = json_object_get(o, lists[k]);
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v) {
            json_t *f = find_component(v, type);
            if (f) return f;
        }
    }
    return NULL;
}

static const char *str_field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int lookup(const tokenizer *t, const char *s, int32_t *id)
{
    int64_t v;
    if (!s || !rh_strmap_get(&t->vocab, s, strlen(s), &v)) return 0;
    *id = (int32_t)v;
    return 1;
}

static int set_piece(tokenizer *t, int32_t id, const char *bytes, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return -1;
    memcpy(p, bytes, n);
    p[n] = '\0';
    free(t->piece[id]);
    t->piece[id] = p;
    t->piece_len[id] = (uint32_t)n;
    return 0;
}

/* The bytes a vocabulary entry decodes to. */
static int vocab_piece(tokenizer *t, int32_t id, const char *tok, size_t tl, const uint16_t *cp_to_byte)
{
    char *buf = malloc(tl + 1);
    if (!buf) return -1;
    size_t n = 0;
    if (t->kind == TOK_BPE_BYTELEVEL) {
        for (size_t i = 0; i < tl;) {
            size_t cl = tok_utf8_len(tok + i, tl - i);
            uint32_t cp = get_cp(tok + i, cl);
            if (cp < 512 && cp_to_byte[cp]) buf[n++] = (char)(cp_to_byte[cp] - 1);
            else memcpy(buf + n, tok + i, cl), n += cl;
            i += cl;
        }
    } else {
        if (tl == 6 && !memcmp(tok, "<0x", 3) && isxdigit((unsigned char)tok[3]) &&
            isxdigit((unsigned char)tok[4]) && tok[5] == '>') {
            buf[n++] = (char)strtol(tok + 3, NULL, 16);   /* stops at '>' */
        } else {
            for (size_t i = 0; i < tl;) {
                if (i + 3 <= tl && !memcmp(tok + i, "\xe2\x96\x81", 3)) {
                    buf[n++] = ' ';
                    i += 3;
                } else {
                    buf[n++] = tok[i++];
                }
            }
        }
    }
    int r = set_piece(t, id, buf, n);
    free(buf);
    return r;
}

static int cmp_added(const void *a, const void *b)
{
    const tok_added *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? 1 : -1;
    return memcmp(x->text, y->text, x->len);
}

/* The stage a Split's regex is: the patterns of the tokenizers people
 * serve, recognised whole; any other is taken for the Llama 3 family when
 * it has its letter alternative and for GPT-2's otherwise (close, not
 * exact: the header says so). */
static int split_stage(const char *re, int *digits)
{
    static const char deepseek[] =
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
        " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
    *digits = 0;
    if (!strcmp(re, "\\p{N}{1,3}")) {
        *digits = 3;
        return TOK_SPLIT_DIGITS;
    }
    if (!strcmp(re, "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+")) return TOK_SPLIT_CJK;
    if (!strcmp(re, deepseek)) return TOK_SPLIT_DEEPSEEK;
    if (strstr(re, "(?i:") || strstr(re, "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+")) {
        *digits = strstr(re, "\\p{N}{1,3}") ? 3 : 1;
        return TOK_SPLIT_LLAMA3;
    }
    return TOK_SPLIT_GPT2;
}

/* The Splits of the pre-tokenizer (itself one, or a Sequence of them), in order. */
static int collect_splits(tokenizer *t, json_t *pre, const char *path, rh_err *e)
{
    json_t *list = json_object_get(pre, "pretokenizers");
    size_t n = has_type(pre, "Sequence") ? json_array_size(list) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *p = has_type(pre, "Sequence") ? json_array_get(list, i) : pre;
        if (!has_type(p, "Split")) continue;
        const char *re = str_field(json_object_get(p, "pattern"), "Regex");
        const char *behavior = str_field(p, "behavior");
        if (!re) return rh_fail(e, "%s: field 'pre_tokenizer': a Split without a 'pattern.Regex'", path);
        if ((behavior && strcmp(behavior, "Isolated")) || json_is_true(json_object_get(p, "invert")))
            return rh_fail(e, "%s: field 'pre_tokenizer': Split behavior '%s'%s is not supported (Isolated only)", path,
                           behavior ? behavior : "?", json_is_true(json_object_get(p, "invert")) ? " inverted" : "");
        if (t->n_stages == TOK_MAX_STAGES)
            return rh_fail(e, "%s: field 'pre_tokenizer': more than %d Splits", path, TOK_MAX_STAGES);
        t->stage[t->n_stages] = split_stage(re, &t->stage_digits[t->n_stages]);
        t->n_stages++;
    }
    return 0;
}

/* NFC is the one normalizer byte-level BPE files use (Qwen2, Qwen3); any
 * other would change the text in a way rehearse does not, so it is refused. */
static int byte_level_normalizer(tokenizer *t, json_t *norm, const char *path, rh_err *e)
{
    if (!json_is_object(norm)) return 0;
    json_t *list = json_object_get(norm, "normalizers");
    size_t n = has_type(norm, "Sequence") ? json_array_size(list) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *one = has_type(norm, "Sequence") ? json_array_get(list, i) : norm;
        const char *type = str_field(one, "type");
        if (type && !strcmp(type, "NFC")) t->nfc = true;
        else return rh_fail(e, "%s: field 'normalizer': type '%s' is not supported with byte-level BPE (NFC only)",
                            path, type ? type : "?");
    }
    return 0;
}

/* Which BPE flavour and which pre-tokenization the file describes. */
static int detect_kind(tokenizer *t, json_t *root, json_t *model, const char *path, rh_err *e)
{
    json_t *pre = json_object_get(root, "pre_tokenizer"), *norm = json_object_get(root, "normalizer");
    json_t *dec = json_object_get(root, "decoder");
    json_t *bl = find_component(pre, "ByteLevel");
    if (bl || find_component(dec, "ByteLevel")) {
        t->kind = TOK_BPE_BYTELEVEL;
        if (collect_splits(t, pre, path, e) || byte_level_normalizer(t, norm, path, e)) return -1;
        json_t *ur = bl ? json_object_get(bl, "use_regex") : NULL;
        if (t->n_stages == 0 && !(ur && json_is_false(ur))) {
            t->stage[0] = TOK_SPLIT_GPT2;   /* ByteLevel's own regex */
            t->n_stages = 1;
        }
        return 0;
    }
    json_t *meta = find_component(pre, "Metaspace");
    json_t *prep = find_component(norm, "Prepend");
    json_t *bf = json_object_get(model, "byte_fallback");
    if (meta || prep || find_component(norm, "Replace") || json_is_true(bf)) {
        t->kind = TOK_BPE_SPM;
        if (prep) t->spm_prefix_space = 1;
        if (meta) {
            const char *scheme = str_field(meta, "prepend_scheme");
            json_t *aps = json_object_get(meta, "add_prefix_space");
            t->spm_prefix_space = scheme ? strcmp(scheme, "never") != 0 : !json_is_false(aps);
        }
        return 0;
    }
    return rh_fail(e, "%s: field 'pre_tokenizer': neither byte-level (ByteLevel) nor SentencePiece-style "
                      "(Metaspace, or a normalizer replacing spaces) BPE",
                   path);
}

static int load_vocab(tokenizer *t, json_t *vocab, json_t *added, const char *path, rh_err *e)
{
    if (!json_is_object(vocab)) return rh_fail(e, "%s: field 'model.vocab' is missing or not an object", path);
    int64_t max_id = -1;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24))
            return rh_fail(e, "%s: field 'model.vocab': token '%s' has no valid id", path, key);
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
        if (rh_strmap_put(&t->vocab, key, strlen(key), json_integer_value(v))) return rh_fail(e, "out of memory");
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (!json_is_string(json_object_get(v, "content")) || !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 24))
            return rh_fail(e, "%s: field 'added_tokens[%zu]': needs 'id' and 'content'", path, i);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) return rh_fail(e, "%s: field 'model.vocab' is empty", path);
    t->vocab_size = (uint32_t)max_id + 1;
    t->piece = calloc(t->vocab_size, sizeof *t->piece);
    t->piece_len = calloc(t->vocab_size, sizeof *t->piece_len);
    t->special = calloc(t->vocab_size, 1);
    if (!t->piece || !t->piece_len || !t->special) return rh_fail(e, "out of memory");
    return 0;
}

static int load_merges(tokenizer *t, json_t *merges, const char *path, rh_err *e)
{
    if (!json_is_array(merges)) return rh_fail(e, "%s: field 'model.merges' is missing or not a list", path);
    size_t i;
    json_t *m;
    char buf[1024];
    json_array_foreach(merges, i, m) {
        const char *a, *b;
        size_t al, bl;
        char one[512];
        if (json_is_string(m)) {
            /* "left right": the separator is the first space (tokens hold none). */
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (!sp || sp == s || (size_t)(sp - s) >= sizeof one)
                return rh_fail(e, "%s: field 'model.merges[%zu]': '%s' is not 'left right'", path, i, s);
            memcpy(one, s, (size_t)(sp - s));
            one[sp - s] = '\0';
            a = one;
            b = sp + 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
        } else {
            return rh_fail(e, "%s: field 'model.merges[%zu]': expected \"left right\" or [left, right]", path, i);
        }
        al = strlen(a);
        bl = strlen(b);
        if (al + bl >= sizeof buf) return rh_fail(e, "%s: field 'model.merges[%zu]': tokens too long", path, i);
        memcpy(buf, a, al);
        memcpy(buf + al, b, bl + 1);
        int32_t ia, ib, im;
        if (!lookup(t, a, &ia) || !lookup(t, b, &ib) || !lookup(t, buf, &im))
            return rh_fail(e, "%s: field 'model.merges[%zu]': '%s', '%s' or '%s' is not in the vocabulary", path, i, a,
                           b, buf);
        uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, old;
        if (rh_map64_get(&t->merges, key, &old)) continue;   /* the first (best) rank wins */
        if (rh_map64_put(&t->merges, key, (uint64_t)i << 32 | (uint32_t)im)) return rh_fail(e, "out of memory");
    }
    return 0;
}

static int load_added(tokenizer *t, json_t *added, rh_err *e)
{
    size_t i, n = json_array_size(added);
    json_t *v;
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return rh_fail(e, "out of memory");
    json_array_foreach(added, i, v) {
        const char *content = json_string_value(json_object_get(v, "content"));
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        size_t len = strlen(content);
        if (set_piece(t, id, content, len) || rh_strmap_put(&t->vocab, content, len, id)) return rh_fail(e, "out of memory");
        t->special[id] = json_is_true(json_object_get(v, "special"));
        if (!len) continue;
        if (!(t->added[t->n_added].text = strdup(content))) return rh_fail(e, "out of memory");
        t->added[t->n_added].len = len;
        t->added[t->n_added].id = id;
        t->n_added++;
    }
    qsort(t->added, t->n_added, sizeof *t->added, cmp_added);
    return 0;
}

/* BOS from the post-processor's template ("single": [<bos>, $A]); EOS by the
 * usual names. Models usually carry eos_token_id in config.json too. */
static void find_bos_eos(tokenizer *t, json_t *root)
{
    t->bos = t->eos = -1;
    json_t *tp = find_component(json_object_get(root, "post_processor"), "TemplateProcessing");
    json_t *first = json_array_get(json_object_get(tp, "single"), 0);
    const char *name = str_field(json_object_get(first, "SpecialToken"), "id");
    lookup(t, name, &t->bos);
    const char *eos_names[] = {"</s>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>"};
    for (size_t i = 0; i < 4 && t->eos < 0; i++) lookup(t, eos_names[i], &t->eos);
}

tokenizer *tok_load(const char *path, rh_err *e)
{
    char file[4200];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(file, sizeof file, "%s/tokenizer.json", path);
    else snprintf(file, sizeof file, "%s", path);
    json_error_t je;
    json_t *root = json_load_file(file, 0, &je);
    if (!root) {
        if (je.line < 0) rh_fail(e, "%s: %s", file, je.text);
        else rh_fail(e, "%s:%d:%d: %s", file, je.line, je.column, je.text);
        return NULL;
    }
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(root);
        rh_fail(e, "out of memory");
        return NULL;
    }
    t->unk = -1;
    json_t *model = json_object_get(root, "model");
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added)) {
        rh_fail(e, "%s: field 'added_tokens': expected a list", file);
        goto fail;
    }
    if (!json_is_object(model)) {
        rh_fail(e, "%s: field 'model' is missing or not an object", file);
        goto fail;
    }
    const char *type = str_field(model, "type");
    if (type && strcmp(type, "BPE")) {
        rh_fail(e, "%s: field 'model.type': '%s' is not supported (BPE only)", file, type);
        goto fail;
    }
    if (detect_kind(t, root, model, file, e) || load_vocab(t, json_object_get(model, "vocab"), added, file, e))
        goto fail;
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));

    /* Every vocabulary entry's bytes, then the byte-symbol ids. */
    uint16_t cp_to_byte[512] = {0};   /* byte + 1; 0: not a byte character */
    for (int b = 0; b < 256; b++) cp_to_byte[tok_byte_to_cp((uint8_t)b)] = (uint16_t)(b + 1);
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(model, "vocab"), key, v) {
        if (vocab_piece(t, (int32_t)json_integer_value(v), key, strlen(key), cp_to_byte)) {
            rh_fail(e, "out of memory");
            goto fail;
        }
    }
    for (int b = 0; b < 256; b++) {
        char sym[8];
        size_t n;
        int64_t id = -1;
        if (t->kind == TOK_BPE_BYTELEVEL) n = put_utf8(tok_byte_to_cp((uint8_t)b), sym);
        else n = (size_t)snprintf(sym, sizeof sym, "<0x%02X>", b);
        if (!rh_strmap_get(&t->vocab, sym, n, &id) && t->kind == TOK_BPE_BYTELEVEL) {
            rh_fail(e, "%s: field 'model.vocab': byte-level BPE needs a token for byte 0x%02x ('%.*s')", file, b,
                    (int)n, sym);
            goto fail;
        }
        t->byte_id[b] = (int32_t)id;
    }
    if (load_merges(t, json_object_get(model, "merges"), file, e) || load_added(t, added, e)) goto fail;
    lookup(t, str_field(model, "unk_token"), &t->unk);
    find_bos_eos(t, root);
    if (tok_load_config(t, file, e)) goto fail;
    tok_note_pieces(t);
    json_decref(root);
    return t;
fail:
    json_decref(root);
    tok_free(t);
    return NULL;
}
