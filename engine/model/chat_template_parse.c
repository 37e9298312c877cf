/* chat_template_parse.c — tokens to a tree: the parser's cursor and node
 * helpers, the statements ({% if %}, {% for %}, {% set %}, {% macro %}, ...)
 * and the entry points; expressions are chat_template_expr.c's. Nesting is
 * bounded (CT_MAX_NEST) in the parser and in the tree's height, so neither
 * parsing nor evaluation nor freeing can exhaust the stack. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/chat_template_impl.h"

ct_tok *ctp_cur(ct_parser *p) { return &p->t->v[p->i]; }
ct_tok *ctp_peek(ct_parser *p, size_t k) { return p->i + k < p->t->n ? &p->t->v[p->i + k] : &p->t->v[p->t->n - 1]; }
void ctp_next(ct_parser *p)
{
    if (p->i + 1 < p->t->n) p->i++;
}

static const char *describe(const ct_tok *t, char *buf, size_t n)
{
    switch (t->kind) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "template text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "end of print statement";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "end of statement block";
    case TK_NAME: snprintf(buf, n, "'%.40s'", t->s); return buf;
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    default: snprintf(buf, n, "'%s'", ct_op_name(t->op)); return buf;
    }
}

int ctp_fail(ct_parser *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int ctp_fail(ct_parser *p, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rh_fail(p->e, "chat template line %d: %s", line, msg);
}

int ctp_unexpected(ct_parser *p, const char *wanted)
{
    char buf[64];
    const ct_tok *t = ctp_cur(p);
    if (wanted) return ctp_fail(p, t->line, "expected %s, got %s", wanted, describe(t, buf, sizeof buf));
    return ctp_fail(p, t->line, "unexpected %s", describe(t, buf, sizeof buf));
}

int ctp_is_op(ct_parser *p, int op) { return ctp_cur(p)->kind == TK_OP && ctp_cur(p)->op == op; }
int ctp_is_name(const ct_tok *t, const char *s) { return t->kind == TK_NAME && !strcmp(t->s, s); }
int ctp_at_name(ct_parser *p, const char *s) { return ctp_is_name(ctp_cur(p), s); }

int ctp_accept(ct_parser *p, int op)
{
    if (!ctp_is_op(p, op)) return 0;
    ctp_next(p);
    return 1;
}

int ctp_expect(ct_parser *p, int op)
{
    if (ctp_accept(p, op)) return 0;
    char want[16];
    snprintf(want, sizeof want, "'%s'", ct_op_name(op));
    return ctp_unexpected(p, want);
}

int ctp_expect_kind(ct_parser *p, int kind, const char *what)
{
    if (ctp_cur(p)->kind != kind) return ctp_unexpected(p, what);
    ctp_next(p);
    return 0;
}

/* ---- nodes ---- */

static void list_free(ct_list *l)
{
    for (size_t i = 0; i < l->n; i++) ct_node_free(l->v[i]);
    free(l->v);
}

void ct_node_free(ct_node *n)
{
    if (!n) return;
    ct_node_free(n->a);
    ct_node_free(n->b);
    ct_node_free(n->c);
    ct_node_free(n->d);
    list_free(&n->args);
    list_free(&n->body);
    list_free(&n->alt);
    if (n->lit) json_decref(n->lit);
    free(n->str);
    free(n->ops);
    free(n);
}

ct_node *ctp_node(ct_parser *p, int kind, int line)
{
    ct_node *n = calloc(1, sizeof *n);
    if (!n)
        ctp_fail(p, line, "out of memory");
    else
        n->kind = (uint8_t)kind, n->line = line, n->height = 1;
    return n;
}

int ctp_push(ct_parser *p, ct_list *l, ct_node *x)
{
    if (!x) return -1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        ct_node **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            ct_node_free(x);
            return ctp_fail(p, x ? x->line : 0, "out of memory");
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

static int max_height(const ct_list *l)
{
    int h = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i]->height > h) h = l->v[i]->height;
    return h;
}

/* Sets n's height from its children; -1 with a message when the tree grows too tall. */
int ctp_tall(ct_parser *p, ct_node *n)
{
    int h = 0;
    const ct_node *kids[] = {n->a, n->b, n->c, n->d};
    for (int k = 0; k < 4; k++)
        if (kids[k] && kids[k]->height > h) h = kids[k]->height;
    int l = max_height(&n->args);
    if (l > h) h = l;
    if ((l = max_height(&n->body)) > h) h = l;
    if ((l = max_height(&n->alt)) > h) h = l;
    n->height = h + 1;
    if (n->height > CT_MAX_NEST * 4)
        return ctp_fail(p, n->line, "the template nests too deeply (over %d levels)", CT_MAX_NEST * 4);
    return 0;
}

/* ctp_tall() for a node not yet attached anywhere: NULL (n freed) when too tall. */
ct_node *ctp_seal(ct_parser *p, ct_node *n)
{
    if (n && ctp_tall(p, n)) {
        ct_node_free(n);
        return NULL;
    }
    return n;
}

ct_node *ctp_mk(ct_parser *p, int kind, int line, ct_node *a, ct_node *b)
{
    ct_node *n = ctp_node(p, kind, line);
    if (!n) {
        ct_node_free(a);
        ct_node_free(b);
        return NULL;
    }
    n->a = a;
    n->b = b;
    return ctp_seal(p, n);
}

char *ctp_dup(ct_parser *p, const char *s, int line)
{
    char *d = strdup(s);
    if (!d) ctp_fail(p, line, "out of memory");
    return d;
}

ct_node *ctp_literal(ct_parser *p, int line, json_t *j)
{
    if (!j) {
        ctp_fail(p, line, "out of memory");
        return NULL;
    }
    ct_node *n = ctp_node(p, E_LIT, line);
    if (!n)
        json_decref(j);
    else
        n->lit = j;
    return n;
}

int ctp_enter(ct_parser *p)
{
    if (++p->depth > CT_MAX_NEST)
        return ctp_fail(p, ctp_cur(p)->line, "the template nests too deeply (over %d levels)", CT_MAX_NEST);
    return 0;
}

/* ---- statements ---- */

static int parse_body(ct_parser *p, ct_list *body, const char *const *ends, const char **which, const char *opened,
                      int open_line);

static int block_end(ct_parser *p) { return ctp_expect_kind(p, TK_BLOCK_END, "end of statement block"); }

/* A name, or names separated by commas (for a, b in ...; set a, b = ...). */
static int parse_targets(ct_parser *p, ct_node *n, int allow_attr)
{
    int paren = ctp_accept(p, OP_LPAREN);
    do {
        if (ctp_cur(p)->kind != TK_NAME) return ctp_unexpected(p, "a name");
        ct_node *t = ctp_node(p, E_NAME, ctp_cur(p)->line);
        if (!t || !(t->str = ctp_dup(p, ctp_cur(p)->s, t->line))) {
            ct_node_free(t);
            return -1;
        }
        ctp_next(p);
        if (allow_attr && !paren && n->args.n == 0 && ctp_is_op(p, OP_DOT) && ctp_peek(p, 1)->kind == TK_NAME) {
            /* set ns.attr = ... */
            ct_node *a = ctp_node(p, E_ATTR, t->line);
            if (!a || !(a->str = ctp_dup(p, ctp_peek(p, 1)->s, t->line))) {
                ct_node_free(a);
                ct_node_free(t);
                return -1;
            }
            a->a = t;
            ctp_next(p);
            ctp_next(p);
            return ctp_push(p, &n->args, ctp_seal(p, a));
        }
        if (ctp_push(p, &n->args, t)) return -1;
    } while (ctp_accept(p, OP_COMMA) && ctp_cur(p)->kind == TK_NAME);
    return paren ? ctp_expect(p, OP_RPAREN) : 0;
}

static ct_node *parse_if(ct_parser *p, int line)
{
    ct_node *n = ctp_node(p, S_IF, line);
    if (!n) return NULL;
    const char *which = "elif";
    int bline = line;
    p->conds++;
    while (!strcmp(which, "elif")) {
        ct_node *br = ctp_node(p, S_BRANCH, bline);
        if (!br) goto fail;
        if (!(br->a = ctp_expr(p, 0)) || block_end(p) ||
            parse_body(p, &br->body, (const char *const[]){"elif", "else", "endif", NULL}, &which, "if", line) ||
            ctp_tall(p, br)) {
            ct_node_free(br);
            goto fail;
        }
        if (ctp_push(p, &n->args, br)) goto fail;
        bline = ctp_cur(p)->line;
    }
    if (!strcmp(which, "else") &&
        (block_end(p) || parse_body(p, &n->alt, (const char *const[]){"endif", NULL}, &which, "if", line)))
        goto fail;
    p->conds--;
    if (block_end(p)) {
        ct_node_free(n);
        return NULL;
    }
    return ctp_seal(p, n);
fail:
    p->conds--;
    ct_node_free(n);
    return NULL;
}

static ct_node *parse_for(ct_parser *p, int line)
{
    ct_node *n = ctp_node(p, S_FOR, line);
    if (!n) return NULL;
    const char *which;
    if (parse_targets(p, n, 0)) goto fail;
    if (!ctp_at_name(p, "in")) {
        ctp_unexpected(p, "'in'");
        goto fail;
    }
    ctp_next(p);
    if (!(n->a = ctp_tuple(p, 0, 0))) goto fail;
    if (ctp_at_name(p, "if")) {
        ctp_next(p);
        if (!(n->b = ctp_expr(p, 1))) goto fail;
    }
    if (ctp_at_name(p, "recursive")) {
        ctp_fail(p, ctp_cur(p)->line, "recursive for loops are not supported");
        goto fail;
    }
    if (block_end(p)) goto fail;
    p->loops++;
    int rc = parse_body(p, &n->body, (const char *const[]){"endfor", "else", NULL}, &which, "for", line);
    p->loops--;
    if (!rc && !strcmp(which, "else"))
        rc = block_end(p) || parse_body(p, &n->alt, (const char *const[]){"endfor", NULL}, &which, "for", line);
    if (rc || block_end(p)) goto fail;
    return ctp_seal(p, n);
fail:
    ct_node_free(n);
    return NULL;
}

static ct_node *parse_set(ct_parser *p, int line)
{
    ct_node *n = ctp_node(p, S_SET, line);
    if (!n) return NULL;
    const char *which;
    if (parse_targets(p, n, 1)) goto fail;
    if (ctp_accept(p, OP_ASSIGN)) {
        if (!(n->a = ctp_tuple(p, 1, 0)) || block_end(p)) goto fail;
        return ctp_seal(p, n);
    }
    /* {% set x %}...{% endset %} captures its body */
    if (n->args.n != 1 || n->args.v[0]->kind != E_NAME) {
        ctp_unexpected(p, "'='");
        goto fail;
    }
    n->kind = S_SETBLOCK;
    n->str = n->args.v[0]->str;
    n->args.v[0]->str = NULL;
    if (block_end(p) || parse_body(p, &n->body, (const char *const[]){"endset", NULL}, &which, "set", line) ||
        block_end(p))
        goto fail;
    return ctp_seal(p, n);
fail:
    ct_node_free(n);
    return NULL;
}

static ct_node *parse_macro(ct_parser *p, int line)
{
    ct_node *n = ctp_node(p, S_MACRO, line);
    if (!n) return NULL;
    const char *which;
    if (ctp_cur(p)->kind != TK_NAME) {
        ctp_unexpected(p, "a macro name");
        goto fail;
    }
    if (!(n->str = ctp_dup(p, ctp_cur(p)->s, line))) goto fail;
    ctp_next(p);
    if (ctp_expect(p, OP_LPAREN)) goto fail;
    while (!ctp_is_op(p, OP_RPAREN)) {
        if (n->args.n && ctp_expect(p, OP_COMMA)) goto fail;
        if (ctp_is_op(p, OP_RPAREN)) break;
        if (ctp_cur(p)->kind != TK_NAME) {
            ctp_unexpected(p, "a parameter name");
            goto fail;
        }
        ct_node *prm = ctp_node(p, E_PARAM, ctp_cur(p)->line);
        if (ctp_push(p, &n->args, prm) || !(prm->str = ctp_dup(p, ctp_cur(p)->s, prm->line))) goto fail;
        ctp_next(p);
        if (ctp_accept(p, OP_ASSIGN) && (!(prm->a = ctp_expr(p, 1)) || ctp_tall(p, prm))) goto fail;
    }
    ctp_next(p);
    int loops = p->loops;
    p->loops = 0; /* break / continue do not cross a macro */
    int rc = block_end(p) || parse_body(p, &n->body, (const char *const[]){"endmacro", NULL}, &which, "macro", line) ||
             block_end(p);
    p->loops = loops;
    if (rc) goto fail;
    return ctp_seal(p, n);
fail:
    ct_node_free(n);
    return NULL;
}

static ct_node *parse_filter_block(ct_parser *p, int line)
{
    ct_node *n = ctp_node(p, S_FILTER, line);
    if (!n) return NULL;
    const char *which;
    ct_node *chain = ctp_node(p, E_CAPTURE, line);
    do chain = chain ? ctp_filter(p, chain) : NULL;
    while (chain && ctp_accept(p, OP_PIPE));
    if (!(n->a = chain) || block_end(p) ||
        parse_body(p, &n->body, (const char *const[]){"endfilter", NULL}, &which, "filter", line) || block_end(p)) {
        ct_node_free(n);
        return NULL;
    }
    return ctp_seal(p, n);
}

static ct_node *parse_with(ct_parser *p, int line)
{
    ct_node *n = ctp_node(p, S_WITH, line);
    if (!n) return NULL;
    const char *which;
    while (ctp_cur(p)->kind != TK_BLOCK_END) {
        if (n->args.n && ctp_expect(p, OP_COMMA)) goto fail;
        if (ctp_cur(p)->kind != TK_NAME) {
            ctp_unexpected(p, "a name");
            goto fail;
        }
        ct_node *prm = ctp_node(p, E_PARAM, ctp_cur(p)->line);
        if (ctp_push(p, &n->args, prm) || !(prm->str = ctp_dup(p, ctp_cur(p)->s, prm->line))) goto fail;
        ctp_next(p);
        if (ctp_expect(p, OP_ASSIGN) || !(prm->a = ctp_expr(p, 1)) || ctp_tall(p, prm)) goto fail;
    }
    if (block_end(p) || parse_body(p, &n->body, (const char *const[]){"endwith", NULL}, &which, "with", line) ||
        block_end(p))
        goto fail;
    return ctp_seal(p, n);
fail:
    ct_node_free(n);
    return NULL;
}

static ct_node *parse_statement(ct_parser *p)
{
    ct_tok *t = ctp_cur(p);
    int line = t->line;
    if (t->kind != TK_NAME) {
        ctp_unexpected(p, "a statement name");
        return NULL;
    }
    if (ctp_enter(p)) return NULL;
    const char *w = t->s;
    ct_node *n = NULL;
    ctp_next(p);
    if (!strcmp(w, "if"))
        n = parse_if(p, line);
    else if (!strcmp(w, "for"))
        n = parse_for(p, line);
    else if (!strcmp(w, "set"))
        n = parse_set(p, line);
    else if (!strcmp(w, "macro"))
        n = parse_macro(p, line);
    else if (!strcmp(w, "filter"))
        n = parse_filter_block(p, line);
    else if (!strcmp(w, "with"))
        n = parse_with(p, line);
    else if (!strcmp(w, "break") || !strcmp(w, "continue")) {
        if (!p->loops)
            ctp_fail(p, line, "'%s' outside a for loop", w);
        else if (!block_end(p))
            n = ctp_node(p, w[0] == 'b' ? S_BREAK : S_CONTINUE, line);
    } else if (!strcmp(w, "generation")) {
        /* transformers' {% generation %} marks assistant text; it renders as is */
        const char *which;
        n = ctp_node(p, S_BODY, line);
        if (n && (block_end(p) ||
                  parse_body(p, &n->body, (const char *const[]){"endgeneration", NULL}, &which, "generation", line) ||
                  block_end(p)))
            ct_node_free(n), n = NULL;
        n = ctp_seal(p, n);
    } else {
        ctp_fail(p, line, "unknown tag '%s'", w);
    }
    p->depth--;
    return n;
}

static void list_words(const char *const *ends, char *buf, size_t n)
{
    buf[0] = '\0';
    for (size_t k = 0; ends[k]; k++) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s'%s'", k ? " or " : "", ends[k]);
    }
}

/* Statements until a {% tag %} named in ends (NULL: until the end); on
 * return *which is that name and the cursor is after it. */
static int parse_statements(ct_parser *p, ct_list *body, const char *const *ends, const char **which,
                            const char *opened, int open_line);

static int parse_body(ct_parser *p, ct_list *body, const char *const *ends, const char **which, const char *opened,
                      int open_line)
{
    /* the body of anything but an if is a hard frame again */
    int conds = p->conds;
    if (opened && strcmp(opened, "if")) p->conds = 0;
    int rc = parse_statements(p, body, ends, which, opened, open_line);
    p->conds = conds;
    return rc;
}

static int parse_statements(ct_parser *p, ct_list *body, const char *const *ends, const char **which,
                            const char *opened, int open_line)
{
    char words[128];
    for (;;) {
        ct_tok *t = ctp_cur(p);
        int line = t->line;
        if (t->kind == TK_EOF) {
            if (!ends) return 0;
            list_words(ends, words, sizeof words);
            return ctp_fail(p, open_line, "'%s' is not closed: expected %s before the end of the template", opened,
                            words);
        }
        if (t->kind == TK_TEXT) {
            ct_node *n = ctp_node(p, S_TEXT, line);
            if (ctp_push(p, body, n)) return -1;
            n->str = t->s;
            n->len = t->len;
            t->s = NULL; /* the node owns the text now */
            ctp_next(p);
        } else if (t->kind == TK_VAR_BEGIN) {
            ctp_next(p);
            ct_node *n = ctp_mk(p, S_PRINT, line, ctp_tuple(p, 1, 0), NULL);
            if (n && !n->a) ct_node_free(n), n = NULL;
            if (ctp_push(p, body, n) || ctp_expect_kind(p, TK_VAR_END, "end of print statement") || ctp_settle(p))
                return -1;
        } else if (t->kind == TK_BLOCK_BEGIN) {
            ct_tok *name = ctp_peek(p, 1);
            if (ends && name->kind == TK_NAME)
                for (size_t k = 0; ends[k]; k++)
                    if (!strcmp(name->s, ends[k])) {
                        *which = ends[k];
                        ctp_next(p);
                        ctp_next(p);
                        return 0;
                    }
            if (name->kind == TK_NAME && !strncmp(name->s, "end", 3)) {
                if (!ends) return ctp_fail(p, name->line, "unexpected '%s': no block is open", name->s);
                list_words(ends, words, sizeof words);
                return ctp_fail(p, name->line, "unexpected '%s': expected %s to close the '%s' of line %d", name->s,
                                words, opened, open_line);
            }
            ctp_next(p);
            if (ctp_push(p, body, parse_statement(p)) || ctp_settle(p)) return -1;
        } else {
            return ctp_unexpected(p, NULL);
        }
    }
}

chat_template *chat_template_parse(const char *src, size_t len, rh_err *e)
{
    if (!src && len) {
        rh_fail(e, "chat template: no text");
        return NULL;
    }
    ct_toks toks;
    if (ct_lex(src ? src : "", len, &toks, e)) return NULL;
    chat_template *t = calloc(1, sizeof *t);
    ct_parser p = {.t = &toks, .e = e};
    if (!t)
        rh_fail(e, "chat template: out of memory");
    else if (parse_body(&p, &t->body, NULL, NULL, NULL, 0)) {
        chat_template_free(t);
        t = NULL;
    }
    ct_toks_free(&toks);
    return t;
}

void chat_template_free(chat_template *t)
{
    if (!t) return;
    list_free(&t->body);
    free(t);
}
