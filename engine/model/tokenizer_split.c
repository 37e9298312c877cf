/* tokenizer_split.c — pre-tokenization: cutting text into the pieces BPE
 * merges within, as the split regexes of GPT-2 and Llama 3 / Qwen2 do.
 *
 * The regexes are evaluated by hand, alternative by alternative in their
 * order, because the C library's regex has no \p{L} and a regex engine is
 * more than this needs. Classes: letters are ASCII letters and every
 * non-ASCII code point except the Unicode spaces; numbers are ASCII digits. */
#include <string.h>

#include "engine/model/tokenizer_impl.h"

enum { C_LETTER, C_NUMBER, C_SPACE, C_OTHER, C_END };

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

typedef struct scan {
    const char *s;
    size_t len;
} scan;

/* Class and byte length of the character at i. */
static int cls(const scan *sc, size_t i, size_t *n)
{
    if (i >= sc->len) {
        *n = 0;
        return C_END;
    }
    *n = tok_utf8_len(sc->s + i, sc->len - i);
    uint32_t c = decode_cp(sc->s + i, *n);
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_LETTER;
        if (c >= '0' && c <= '9') return C_NUMBER;
        if (c == ' ' || (c >= '\t' && c <= '\r')) return C_SPACE;
        return C_OTHER;
    }
    if (c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
        c == 0x202f || c == 0x205f || c == 0x3000)
        return C_SPACE;
    if (*n == 1) return C_OTHER;   /* a stray byte of broken UTF-8 */
    return C_LETTER;
}

static int is_newline(const scan *sc, size_t i)
{
    return i < sc->len && (sc->s[i] == '\n' || sc->s[i] == '\r');
}

/* End of a run of class k starting at i (at most max characters; 0 = no limit). */
static size_t run(const scan *sc, size_t i, int k, size_t max)
{
    size_t n, count = 0;
    while (cls(sc, i, &n) == k && (!max || count < max)) {
        i += n;
        count++;
    }
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
    if (k == C_LETTER || k == C_NUMBER || k == C_OTHER) return run(sc, j, k, 0);
    return space_run(sc, i);
}

static size_t next_llama3(const scan *sc, size_t i, int digits)
{
    size_t n, m, e;
    if ((e = contraction(sc, i, 1)) > i) return e;
    int k = cls(sc, i, &n);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (k == C_LETTER) return run(sc, i, C_LETTER, 0);
    if (k != C_NUMBER && !is_newline(sc, i) && cls(sc, i + n, &m) == C_LETTER) return run(sc, i + n, C_LETTER, 0);
    /* \p{N}{1,k} */
    if (k == C_NUMBER) return run(sc, i, C_NUMBER, (size_t)digits);
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t j = i;
    if (sc->s[i] == ' ' && cls(sc, i + 1, &m) == C_OTHER) j = i + 1;
    if (cls(sc, j, &m) == C_OTHER) {
        e = run(sc, j, C_OTHER, 0);
        while (is_newline(sc, e)) e++;
        return e;
    }
    /* \s*[\r\n]+ : the whitespace run up to its last newline */
    size_t end = run(sc, i, C_SPACE, 0), last_nl = 0;
    int found = 0;
    for (size_t p = i; p < end; p++)
        if (is_newline(sc, p)) {
            last_nl = p;
            found = 1;
        }
    if (found) return last_nl + 1;
    return space_run(sc, i);
}

int tok_split_text(int split, int digit_group, const char *s, size_t len, tok_emit_fn emit, void *ctx)
{
    if (split == TOK_SPLIT_NONE) return len ? emit(ctx, s, len) : 0;
    scan sc = {s, len};
    for (size_t i = 0; i < len;) {
        size_t e = split == TOK_SPLIT_GPT2 ? next_gpt2(&sc, i) : next_llama3(&sc, i, digit_group);
        if (e <= i) e = i + tok_utf8_len(s + i, len - i);   /* never stall */
        int r = emit(ctx, s + i, e - i);
        if (r) return r;
        i = e;
    }
    return 0;
}
