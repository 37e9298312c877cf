/* tokenizer_split.c — pre-tokenization: cutting text into the pieces BPE
 * merges within, as the split regexes of GPT-2, Llama 3 / Qwen2 / Qwen3 and
 * the three-stage DeepSeek-V3 sequence do.
 *
 * The regexes are evaluated by hand, alternative by alternative in their
 * order (a regex engine's leftmost-first rule), because the C library's
 * regex has no \p{..} classes and a general engine is more than this needs.
 * Character classes come from utf8proc's Unicode general categories; \s is
 * the reference's (JavaScript's) white space: \t \n \v \f \r, the Zs, Zl
 * and Zp separators, and U+FEFF — not U+0085, which is a control there.
 * Each stage is a "Split" with the Isolated behaviour: matches and the text
 * between them both become pieces, and a later stage splits each piece of
 * the one before on its own (a match never crosses a piece). */
#include <string.h>
#include <utf8proc.h>

#include "engine/model/tokenizer_impl.h"

/* Fine classes; the GPT-2 and Llama 3 patterns see M, P, S and X as "other". */
enum { C_L, C_N, C_M, C_P, C_S, C_SPACE, C_X, C_END };

size_t tok_utf8_len(const char *s, size_t left)
{
    unsigned char c = (unsigned char)s[0];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (n > left) return 1;
    for (size_t i = 1; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80) return 1;
    return n;
}

static uint32_t decode_cp(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    if (n == 1) return u[0];
    if (n == 2) return (uint32_t)(u[0] & 0x1f) << 6 | (u[1] & 0x3f);
    if (n == 3) return (uint32_t)(u[0] & 0x0f) << 12 | (uint32_t)(u[1] & 0x3f) << 6 | (u[2] & 0x3f);
    return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3f) << 12 | (uint32_t)(u[2] & 0x3f) << 6 | (u[3] & 0x3f);
}

static int class_of_cp(uint32_t c)
{
    if (c < 0x80) {   /* the common case without a table lookup */
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_L;
        if (c >= '0' && c <= '9') return C_N;
        if (c == ' ' || (c >= '\t' && c <= '\r')) return C_SPACE;
        if (c < 0x20 || c == 0x7f) return C_X;
        /* ASCII symbols: $ + < = > ^ ` | ~ ; the rest of the printable ones are punctuation */
        return strchr("$+<=>^`|~", (int)c) ? C_S : C_P;
    }
    if (c == 0xfeff) return C_SPACE;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: return C_L;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: return C_M;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: return C_N;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO: return C_P;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO: return C_S;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: return C_SPACE;
    default: return C_X;
    }
}

typedef struct scan {
    const char *s;
    size_t len;
} scan;

/* Fine class and byte length of the character at i. */
static int fine(const scan *sc, size_t i, size_t *n)
{
    if (i >= sc->len) {
        *n = 0;
        return C_END;
    }
    *n = tok_utf8_len(sc->s + i, sc->len - i);
    if (*n == 1 && (unsigned char)sc->s[i] >= 0x80) return C_X;   /* a stray byte of broken UTF-8 */
    return class_of_cp(decode_cp(sc->s + i, *n));
}

/* The coarse class the GPT-2 and Llama 3 patterns use: L, N, \s, other. */
static int cls(const scan *sc, size_t i, size_t *n)
{
    int k = fine(sc, i, n);
    return k == C_M || k == C_P || k == C_S ? C_X : k;
}

static int is_newline(const scan *sc, size_t i)
{
    return i < sc->len && (sc->s[i] == '\n' || sc->s[i] == '\r');
}

/* End of a run of coarse class k starting at i (at most max characters; 0 = no limit). */
static size_t run(const scan *sc, size_t i, int k, size_t max)
{
    size_t n, count = 0;
    while (cls(sc, i, &n) == k && (!max || count < max)) {
        i += n;
        count++;
    }
    return i;
}

/* End of a run of characters whose fine class is a or b. */
static size_t run2(const scan *sc, size_t i, int a, int b)
{
    size_t n;
    for (int k; (k = fine(sc, i, &n)) == a || k == b;) i += n;
    return i;
}

/* 's 't 're 've 'm 'll 'd after an apostrophe at i; returns the end or i. */
static size_t contraction(const scan *sc, size_t i, int any_case)
{
    static const char *tails[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    if (sc->s[i] != '\'') return i;
    for (size_t k = 0; k < sizeof tails / sizeof tails[0]; k++) {
        size_t tl = strlen(tails[k]);
        if (i + 1 + tl > sc->len) continue;
        size_t j = 0;
        for (; j < tl; j++) {
            char c = sc->s[i + 1 + j];
            if (any_case && c >= 'A' && c <= 'Z') c = (char)(c + 32);
            if (c != tails[k][j]) break;
        }
        if (j == tl) return i + 1 + tl;
    }
    return i;
}

/* \s+(?!\S) then \s+: a whitespace run, less its last character when a
 * non-space follows (that character then leads the next piece). */
static size_t space_run(const scan *sc, size_t i)
{
    size_t end = run(sc, i, C_SPACE, 0), n, last = i, p = i;
    if (end >= sc->len) return end;
    while (p < end) {
        last = p;
        cls(sc, p, &n);
        p += n;
    }
    return last > i ? last : end;
}

/* \s*[\r\n]+ : the whitespace run at i up to its last newline; i when it has none. */
static size_t newline_run(const scan *sc, size_t i)
{
    size_t end = run(sc, i, C_SPACE, 0), stop = i;
    for (size_t p = i; p < end; p++)
        if (is_newline(sc, p)) stop = p + 1;
    return stop;
}

static size_t next_gpt2(const scan *sc, size_t i)
{
    size_t n, m, e;
    if ((e = contraction(sc, i, 0)) > i) return e;
    int k = cls(sc, i, &n);
    size_t j = i;
    if (sc->s[i] == ' ' && i + 1 < sc->len) {
        int k2 = cls(sc, i + 1, &m);
        if (k2 != C_SPACE) {
            k = k2;
            j = i + 1;
        }
    }
    if (k == C_L || k == C_N || k == C_X) return run(sc, j, k, 0);
    return space_run(sc, i);
}

static size_t next_llama3(const scan *sc, size_t i, int digits)
{
    size_t n, m, e;
    if ((e = contraction(sc, i, 1)) > i) return e;
    int k = cls(sc, i, &n);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (k == C_L) return run(sc, i, C_L, 0);
    if (k != C_N && !is_newline(sc, i) && cls(sc, i + n, &m) == C_L) return run(sc, i + n, C_L, 0);
    /* \p{N}{1,k} */
    if (k == C_N) return run(sc, i, C_N, (size_t)digits);
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t j = i;
    if (sc->s[i] == ' ' && cls(sc, i + 1, &m) == C_X) j = i + 1;
    if (cls(sc, j, &m) == C_X) {
        e = run(sc, j, C_X, 0);
        while (is_newline(sc, e)) e++;
        return e;
    }
    if ((e = newline_run(sc, i)) > i) return e;
    return space_run(sc, i);
}

/* DeepSeek-V3's third stage, at i; i itself when no alternative matches:
 *   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
 *   | ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+ */
static size_t next_deepseek(const scan *sc, size_t i)
{
    size_t n, m, e;
    unsigned char c = (unsigned char)sc->s[i];
    if (c && c < 0x80 && strchr("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", c) && i + 1 < sc->len &&
        ((sc->s[i + 1] | 0x20) >= 'a' && (sc->s[i + 1] | 0x20) <= 'z')) {
        e = i + 1;
        while (e < sc->len && (sc->s[e] | 0x20) >= 'a' && (sc->s[e] | 0x20) <= 'z') e++;
        return e;
    }
    int k = fine(sc, i, &n);
    /* An L or M opens a letter-mark run itself; anything else but L, P, S and
     * a newline may lead one. */
    if (k == C_L || k == C_M) return run2(sc, i, C_L, C_M);
    if (k != C_P && k != C_S && !is_newline(sc, i)) {
        int k2 = fine(sc, i + n, &m);
        if (k2 == C_L || k2 == C_M) return run2(sc, i + n, C_L, C_M);
    }
    size_t j = i;
    if (c == ' ') {
        int k2 = fine(sc, i + 1, &m);
        if (k2 == C_P || k2 == C_S) j = i + 1;
    }
    k = fine(sc, j, &m);
    if (k == C_P || k == C_S) {
        e = run2(sc, j, C_P, C_S);
        while (is_newline(sc, e)) e++;
        return e;
    }
    if (cls(sc, i, &n) != C_SPACE) return i;
    if ((e = newline_run(sc, i)) > i) return e;
    return space_run(sc, i);
}

/* Runs of \p{N}, at most k a piece, and the text between. */
static size_t next_digits(const scan *sc, size_t i, int k)
{
    size_t n;
    return fine(sc, i, &n) == C_N ? run(sc, i, C_N, (size_t)k) : i;
}

/* [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+: CJK ideographs, hiragana, katakana. */
static int is_cjk(const scan *sc, size_t i, size_t *n)
{
    if (i >= sc->len) return 0;
    *n = tok_utf8_len(sc->s + i, sc->len - i);
    if (*n != 3) return 0;
    uint32_t c = decode_cp(sc->s + i, 3);
    return (c >= 0x4e00 && c <= 0x9fa5) || (c >= 0x3040 && c <= 0x30ff);
}

static size_t next_cjk(const scan *sc, size_t i)
{
    size_t n;
    while (is_cjk(sc, i, &n)) i += n;
    return i;
}

int tok_split_text(int split, int digit_group, const char *s, size_t len, tok_emit_fn emit, void *ctx)
{
    if (split == TOK_SPLIT_NONE) return len ? emit(ctx, s, len) : 0;
    scan sc = {s, len};
    size_t gap = 0;   /* start of the unmatched text before i */
    for (size_t i = 0; i < len;) {
        size_t e;
        switch (split) {
        case TOK_SPLIT_GPT2: e = next_gpt2(&sc, i); break;
        case TOK_SPLIT_LLAMA3: e = next_llama3(&sc, i, digit_group); break;
        case TOK_SPLIT_DIGITS: e = next_digits(&sc, i, digit_group); break;
        case TOK_SPLIT_CJK: e = next_cjk(&sc, i); break;
        default: e = next_deepseek(&sc, i); break;
        }
        if (e <= i) {   /* no match here: the character joins the gap */
            i += tok_utf8_len(s + i, len - i);
            continue;
        }
        int r = gap < i ? emit(ctx, s + gap, i - gap) : 0;
        if (!r) r = emit(ctx, s + i, e - i);
        if (r) return r;
        i = gap = e;
    }
    return gap < len ? emit(ctx, s + gap, len - gap) : 0;
}

/* ---- the stages in sequence -------------------------------------------- */

typedef struct chain {
    const tokenizer *t;
    int stage;
    tok_emit_fn emit;
    void *ctx;
} chain;

static int chain_next(void *ctx, const char *s, size_t len)
{
    chain *c = ctx;
    if (c->stage + 1 >= c->t->n_stages) return c->emit(c->ctx, s, len);
    chain deeper = *c;
    deeper.stage++;
    return tok_split_text(c->t->stage[deeper.stage], c->t->stage_digits[deeper.stage], s, len, chain_next, &deeper);
}

int tok_pretokenize(const tokenizer *t, const char *s, size_t len, tok_emit_fn emit, void *ctx)
{
    if (t->n_stages == 0) return len ? emit(ctx, s, len) : 0;
    chain c = {t, 0, emit, ctx};
    return tok_split_text(t->stage[0], t->stage_digits[0], s, len, chain_next, &c);
}
