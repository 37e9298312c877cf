/* chat_template_lex.c — template source to tokens, following Jinja's lexer
 * (jinja2/lexer.py) as transformers configures it: newlines normalized to
 * \n, one trailing newline dropped, trim_blocks (the newline after a block or
 * comment tag goes), lstrip_blocks (blanks from the line start to a block or
 * comment tag go), "-" and "+" whitespace control, comments, {% raw %}.
 * Inside a tag, "}}" and "%}" end it only outside brackets, as in Jinja. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/chat_template_impl.h"

typedef struct lexer {
    const char *s;
    size_t n, pos;
    int line;
    int line_starting; /* the last thing consumed ended a line (Jinja's line_starting) */
    ct_toks *out;
    rh_err *e;
} lexer;

static int lfail(lexer *L, int line, const char *what)
{
    return rh_fail(L->e, "chat template line %d: %s", line, what);
}

static ct_tok *push(lexer *L, int kind, int line)
{
    if (L->out->n == L->out->cap) {
        size_t cap = L->out->cap ? L->out->cap * 2 : 64;
        ct_tok *v = realloc(L->out->v, cap * sizeof *v);
        if (!v) return NULL;
        L->out->v = v;
        L->out->cap = cap;
    }
    ct_tok *t = &L->out->v[L->out->n++];
    memset(t, 0, sizeof *t);
    t->kind = (uint8_t)kind;
    t->line = line;
    return t;
}

static int push_str(lexer *L, int kind, int line, const char *s, size_t len)
{
    char *copy = malloc(len + 1);
    ct_tok *t = copy ? push(L, kind, line) : NULL;
    if (!t) {
        free(copy);
        return lfail(L, line, "out of memory");
    }
    memcpy(copy, s, len);
    copy[len] = '\0';
    t->s = copy;
    t->len = len;
    return 0;
}

static int count_nl(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

static size_t skip_space(const char *s, size_t n, size_t i)
{
    size_t w;
    while (i < n && (w = ct_space_at(s + i, n - i)) > 0) i += w;
    return i;
}

/* The text before a tag, less what the tag's whitespace control removes:
 * "-" strips all trailing whitespace; otherwise lstrip_blocks (block and
 * comment tags only, not "+") removes blanks between the line start and the tag. */
static int emit_text(lexer *L, size_t end, char sign, int lstrip)
{
    const char *text = L->s + L->pos;
    size_t len = end - L->pos;
    int line = L->line;
    if (sign == '-') {
        len = ct_rstrip_len(text, len);
    } else if (sign != '+' && lstrip) {
        size_t l = len;
        while (l > 0 && text[l - 1] != '\n') l--;
        if ((l > 0 || L->line_starting) && l < len && ct_lstrip_len(text + l, len - l) == len - l) len = l;
    }
    L->line += count_nl(text, end - L->pos);
    L->pos = end;
    return len ? push_str(L, TK_TEXT, line, text, len) : 0;
}

/* After "%}" or "#}": "-" eats all following whitespace, trim_blocks one newline. */
static size_t tag_end(lexer *L, size_t i, char sign)
{
    if (sign == '-')
        i = skip_space(L->s, L->n, i);
    else if (sign != '+' && i < L->n && L->s[i] == '\n')
        i++;
    return i;
}

static void advance(lexer *L, size_t to)
{
    L->line += count_nl(L->s + L->pos, to - L->pos);
    L->line_starting = to > L->pos && L->s[to - 1] == '\n';
    L->pos = to;
}

/* "{% raw %}" at i (after "{%" and its sign): the end of the tag, or 0. */
static size_t raw_begin(const lexer *L, size_t i)
{
    const char *s = L->s;
    size_t n = L->n;
    i = skip_space(s, n, i);
    if (n - i < 3 || memcmp(s + i, "raw", 3)) return 0;
    i = skip_space(s, n, i + 3);
    if (n - i >= 3 && !memcmp(s + i, "-%}", 3)) return skip_space(s, n, i + 3);
    if (n - i >= 2 && !memcmp(s + i, "%}", 2)) return i + 2;
    return 0;
}

/* The first "{% endraw %}" from i: its start, sign and end. */
static int raw_end(const lexer *L, size_t i, size_t *start, char *sign, size_t *end)
{
    const char *s = L->s;
    size_t n = L->n;
    for (; i + 1 < n; i++) {
        if (s[i] != '{' || s[i + 1] != '%') continue;
        size_t j = i + 2;
        char sg = 0;
        if (j < n && (s[j] == '-' || s[j] == '+')) sg = s[j++];
        j = skip_space(s, n, j);
        if (n - j < 6 || memcmp(s + j, "endraw", 6)) continue;
        j = skip_space(s, n, j + 6);
        char es = 0;
        if (j < n && (s[j] == '-' || s[j] == '+')) es = s[j++];
        if (n - j < 2 || memcmp(s + j, "%}", 2)) continue;
        *start = i;
        *sign = sg;
        *end = tag_end((lexer *)L, j + 2, es);
        return 1;
    }
    return 0;
}

static int lex_comment(lexer *L, size_t i, int line)
{
    const char *s = L->s;
    for (size_t q = i; q + 1 < L->n; q++) {
        if (s[q] != '#' || s[q + 1] != '}') continue;
        char sign = q > i && (s[q - 1] == '-' || s[q - 1] == '+') ? s[q - 1] : 0;
        advance(L, tag_end(L, q + 2, sign));
        return 0;
    }
    return lfail(L, line, "missing end of comment tag");
}

static int is_name_start(unsigned char c) { return isalpha(c) || c == '_' || c >= 0x80; }
static int is_name_char(unsigned char c) { return isalnum(c) || c == '_' || c >= 0x80; }

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A quoted string at i; decodes Python's unicode-escape (\n, \t, \xNN, \uNNNN, ...). */
static int lex_string(lexer *L, size_t *ip)
{
    const char *s = L->s;
    size_t n = L->n, i = *ip;
    char q = s[i];
    int line = L->line;
    size_t end = i + 1;
    while (end < n && s[end] != q) end += s[end] == '\\' && end + 1 < n ? 2 : 1;
    if (end >= n) return lfail(L, line, "unterminated string");
    char *out = malloc(end - i); /* decoding never grows the text */
    if (!out) return lfail(L, line, "out of memory");
    size_t k = 0;
    for (size_t j = i + 1; j < end;) {
        if (s[j] != '\\') {
            out[k++] = s[j++];
            continue;
        }
        char c = s[j + 1];
        j += 2;
        const char *simple = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
        const char *m = NULL;
        for (const char *p = simple; *p; p += 2)
            if (*p == c) m = p;
        if (m) {
            out[k++] = m[1];
        } else if (c == '\n') {
            /* a line continuation */
        } else if (c >= '0' && c <= '7') {
            int v = c - '0';
            for (int d = 0; d < 2 && j < end && s[j] >= '0' && s[j] <= '7'; d++) v = v * 8 + (s[j++] - '0');
            k += ct_u8_put(v, out + k);
        } else if (c == 'x' || c == 'u' || c == 'U') {
            int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            long v = 0;
            for (int d = 0; d < digits; d++, j++) {
                int h = j < end ? hexval(s[j]) : -1;
                if (h < 0) {
                    free(out);
                    return lfail(L, line, "truncated escape in a string");
                }
                v = v * 16 + h;
            }
            if (v > 0x10FFFF) {
                free(out);
                return lfail(L, line, "illegal Unicode character in a string");
            }
            if (v >= 0xD800 && v <= 0xDFFF) v = 0xFFFD; /* a lone surrogate cannot be UTF-8 */
            k += ct_u8_put((int32_t)v, out + k);
        } else {
            out[k++] = '\\'; /* Python keeps unknown escapes as written */
            out[k++] = c;
        }
    }
    L->line += count_nl(s + i, end + 1 - i);
    ct_tok *t = push(L, TK_STRING, line);
    if (!t) {
        free(out);
        return lfail(L, line, "out of memory");
    }
    out[k] = '\0';
    t->s = out;
    t->len = k;
    *ip = end + 1;
    return 0;
}

/* Digits with single underscores between them (Python's 1_000). */
static size_t digits(const char *s, size_t n, size_t i, int (*ok)(int))
{
    size_t j = i;
    while (j < n && (ok((unsigned char)s[j]) || (s[j] == '_' && j > i && j + 1 < n && ok((unsigned char)s[j + 1]))))
        j++;
    return j;
}

static int is_dec(int c) { return c >= '0' && c <= '9'; }
static int is_hex(int c) { return isxdigit(c); }
static int is_oct(int c) { return c >= '0' && c <= '7'; }
static int is_bin(int c) { return c == '0' || c == '1'; }

static int lex_number(lexer *L, size_t *ip)
{
    const char *s = L->s;
    size_t n = L->n, i = *ip, j;
    int base = 10, is_float = 0;
    if (s[i] == '0' && i + 2 < n && strchr("xXoObB", s[i + 1]) && s[i + 1]) {
        char b = (char)tolower((unsigned char)s[i + 1]);
        base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
        j = digits(s, n, i + 2, base == 16 ? is_hex : base == 8 ? is_oct : is_bin);
        if (j == i + 2) return lfail(L, L->line, "invalid number");
    } else {
        j = digits(s, n, i, is_dec);
        /* Jinja's float rule does not start right after a "." (x.0.1 is two subscripts). */
        int after_dot = i > 0 && s[i - 1] == '.';
        if (!after_dot && j + 1 < n && s[j] == '.' && is_dec((unsigned char)s[j + 1])) {
            j = digits(s, n, j + 1, is_dec);
            is_float = 1;
        }
        if (!after_dot && j < n && (s[j] == 'e' || s[j] == 'E')) {
            size_t k = j + 1;
            if (k < n && (s[k] == '+' || s[k] == '-')) k++;
            if (k < n && is_dec((unsigned char)s[k])) {
                j = digits(s, n, k, is_dec);
                is_float = 1;
            }
        }
    }
    char buf[128];
    size_t m = 0;
    for (size_t k = base == 10 ? i : i + 2; k < j; k++)
        if (s[k] != '_') {
            if (m + 1 >= sizeof buf) return lfail(L, L->line, "number literal too long");
            buf[m++] = s[k];
        }
    buf[m] = '\0';
    ct_tok *t = push(L, is_float ? TK_FLOAT : TK_INT, L->line);
    if (!t) return lfail(L, L->line, "out of memory");
    errno = 0;
    if (is_float) {
        t->d = strtod(buf, NULL);
    } else {
        t->i = strtoll(buf, NULL, base);
        if (errno == ERANGE) return lfail(L, t->line, "integer literal too large");
    }
    *ip = j;
    return 0;
}

static const struct {
    const char *s;
    int op;
} OPS[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW},   {"==", OP_EQ},      {"!=", OP_NE},      {"<=", OP_LE},    {">=", OP_GE},
    {"+", OP_ADD},       {"-", OP_SUB},    {"*", OP_MUL},      {"/", OP_DIV},      {"%", OP_MOD},    {"~", OP_TILDE},
    {"<", OP_LT},        {">", OP_GT},     {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN}, {")", OP_RPAREN},
    {"{", OP_LBRACE},    {"}", OP_RBRACE}, {"=", OP_ASSIGN},   {".", OP_DOT},      {":", OP_COLON},  {"|", OP_PIPE},
    {",", OP_COMMA},     {";", OP_SEMI},
};

const char *ct_op_name(int op)
{
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++)
        if (OPS[k].op == op) return OPS[k].s;
    return op == OP_IN ? "in" : op == OP_NOTIN ? "not in" : "?";
}

/* The tokens of one {{ }} or {% %} tag, up to and including its end. */
static int lex_tag(lexer *L, int block, int open_line)
{
    const char *s = L->s;
    size_t n = L->n, i = L->pos;
    char stack[CT_MAX_NEST];
    int depth = 0;
    for (;;) {
        if (i >= n) {
            L->pos = i;
            return lfail(L, open_line,
                         block ? "unexpected end of template: a {% tag is not closed"
                               : "unexpected end of template: a {{ tag is not closed");
        }
        if (depth == 0) {
            size_t end = 0;
            if (block) {
                if (n - i >= 3 && (s[i] == '-' || s[i] == '+') && s[i + 1] == '%' && s[i + 2] == '}')
                    end = tag_end(L, i + 3, s[i]);
                else if (n - i >= 2 && s[i] == '%' && s[i + 1] == '}')
                    end = tag_end(L, i + 2, 0);
            } else {
                if (n - i >= 3 && s[i] == '-' && s[i + 1] == '}' && s[i + 2] == '}')
                    end = skip_space(s, n, i + 3);
                else if (n - i >= 2 && s[i] == '}' && s[i + 1] == '}')
                    end = i + 2;
            }
            if (end) {
                L->pos = i;
                if (!push(L, block ? TK_BLOCK_END : TK_VAR_END, L->line)) return lfail(L, L->line, "out of memory");
                advance(L, end);
                return 0;
            }
        }
        unsigned char ch = (unsigned char)s[i];
        size_t w = ct_space_at(s + i, n - i);
        if (w) {
            L->line += ch == '\n';
            i += w;
        } else if (is_dec(ch)) {
            if (lex_number(L, &i)) return -1;
        } else if (is_name_start(ch)) {
            size_t j = i;
            while (j < n && is_name_char((unsigned char)s[j])) j++;
            if (push_str(L, TK_NAME, L->line, s + i, j - i)) return -1;
            i = j;
        } else if (ch == '\'' || ch == '"') {
            if (lex_string(L, &i)) return -1;
        } else {
            int op = 0;
            size_t len = 0;
            for (size_t k = 0; k < sizeof OPS / sizeof OPS[0] && !op; k++) {
                size_t l = strlen(OPS[k].s);
                if (n - i >= l && !memcmp(s + i, OPS[k].s, l)) op = OPS[k].op, len = l;
            }
            if (!op) {
                char msg[64];
                snprintf(msg, sizeof msg,
                         ch >= 0x20 && ch < 0x7f ? "unexpected character '%c'" : "unexpected byte 0x%02x", ch);
                return lfail(L, L->line, msg);
            }
            /* Brackets must balance, as in Jinja, so "}}" inside a dict does not end the tag. */
            if (op == OP_LPAREN || op == OP_LBRACKET || op == OP_LBRACE) {
                if (depth == CT_MAX_NEST) return lfail(L, L->line, "brackets nested too deeply");
                stack[depth++] = op == OP_LPAREN ? ')' : op == OP_LBRACKET ? ']' : '}';
            } else if (op == OP_RPAREN || op == OP_RBRACKET || op == OP_RBRACE) {
                char msg[64];
                if (!depth) {
                    snprintf(msg, sizeof msg, "unexpected '%c'", ch);
                    return lfail(L, L->line, msg);
                }
                if (stack[--depth] != (char)ch) {
                    snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", ch, stack[depth]);
                    return lfail(L, L->line, msg);
                }
            }
            ct_tok *t = push(L, TK_OP, L->line);
            if (!t) return lfail(L, L->line, "out of memory");
            t->op = (uint8_t)op;
            i += len;
        }
    }
}

static int lex_all(lexer *L)
{
    const char *s = L->s;
    size_t n = L->n;
    while (L->pos < n) {
        size_t t = L->pos;
        while (t + 1 < n && !(s[t] == '{' && (s[t + 1] == '%' || s[t + 1] == '{' || s[t + 1] == '#'))) t++;
        if (t + 1 >= n) return emit_text(L, n, 0, 0);
        char kind = s[t + 1];
        size_t after = t + 2;
        char sign = 0;
        if (after < n && (s[after] == '-' || s[after] == '+')) sign = s[after++];
        size_t raw = kind == '%' ? raw_begin(L, after) : 0;
        if (emit_text(L, t, sign, kind != '{')) return -1;
        int line = L->line;
        if (raw) {
            size_t start, end;
            char esign;
            advance(L, raw);
            if (!raw_end(L, L->pos, &start, &esign, &end)) return lfail(L, line, "missing end of raw directive");
            if (emit_text(L, start, esign, 1)) return -1;
            advance(L, end);
        } else if (kind == '#') {
            L->pos = after;
            if (lex_comment(L, after, line)) return -1;
        } else {
            L->pos = after;
            if (!push(L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, line)) return lfail(L, line, "out of memory");
            if (lex_tag(L, kind == '%', line)) return -1;
        }
    }
    return 0;
}

int ct_lex(const char *src, size_t len, ct_toks *out, rh_err *e)
{
    memset(out, 0, sizeof *out);
    /* Jinja normalizes \r\n and \r to \n and drops one trailing newline. */
    char *s = malloc(len + 1);
    if (!s) return rh_fail(e, "chat template: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    lexer L = {.s = s, .n = n, .line = 1, .line_starting = 1, .out = out, .e = e};
    int rc = lex_all(&L);
    if (rc == 0 && !push(&L, TK_EOF, L.line)) rc = lfail(&L, L.line, "out of memory");
    free(s);
    if (rc) ct_toks_free(out);
    return rc;
}

void ct_toks_free(ct_toks *t)
{
    for (size_t i = 0; i < t->n; i++) free(t->v[i].s);
    free(t->v);
    memset(t, 0, sizeof *t);
}
