/* chat_template_expr.c — expressions, by recursive descent with Jinja's
 * grammar and precedence (jinja2/parser.py): conditional < or < and < not <
 * comparisons and in < + - < ~ < * / // % < ** < unary - < postfix (. [] ())
 * and filters / tests, which bind to the unary operand only (a + b | trim
 * filters b). Unknown filters and tests follow Jinja's soft-frame rule
 * (ct_parser's comment). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/chat_template_impl.h"

static ct_node *parse_unary(ct_parser *p, int with_filter);
static ct_node *parse_primary(ct_parser *p);
static ct_node *parse_postfix(ct_parser *p, ct_node *n);

/* A tuple where a comma makes one: "a, b" (or one expression without a comma). */
ct_node *ctp_tuple(ct_parser *p, int condexpr, int explicit_parens)
{
    int line = ctp_cur(p)->line;
    ct_node *t = ctp_node(p, E_TUPLE, line);
    if (!t) return NULL;
    int is_tuple = 0;
    for (;;) {
        if (t->args.n && ctp_expect(p, OP_COMMA)) goto fail;
        const ct_tok *c = ctp_cur(p);
        if (c->kind == TK_VAR_END || c->kind == TK_BLOCK_END || c->kind == TK_EOF || ctp_is_op(p, OP_RPAREN) ||
            (t->args.n && (ctp_is_name(c, "recursive") || ctp_is_name(c, "in"))))
            break;
        if (ctp_push(p, &t->args, ctp_expr(p, condexpr))) goto fail;
        if (!ctp_is_op(p, OP_COMMA)) break;
        is_tuple = 1;
    }
    if (!is_tuple) {
        if (t->args.n == 1) {
            ct_node *only = t->args.v[0];
            t->args.n = 0;
            ct_node_free(t);
            return only;
        }
        if (!explicit_parens) {
            ctp_unexpected(p, "an expression");
            goto fail;
        }
    }
    return ctp_seal(p, t);
fail:
    ct_node_free(t);
    return NULL;
}

/* (args): positional expressions and name=value keywords, into n->args. */
static int parse_call_args(ct_parser *p, ct_node *n)
{
    if (ctp_expect(p, OP_LPAREN)) return -1;
    while (!ctp_is_op(p, OP_RPAREN)) {
        if (n->args.n && ctp_expect(p, OP_COMMA)) return -1;
        if (ctp_is_op(p, OP_RPAREN)) break;
        if (ctp_is_op(p, OP_MUL) || ctp_is_op(p, OP_POW))
            return ctp_fail(p, ctp_cur(p)->line, "*args and **kwargs are not supported");
        if (ctp_cur(p)->kind == TK_NAME && ctp_peek(p, 1)->kind == TK_OP && ctp_peek(p, 1)->op == OP_ASSIGN) {
            ct_node *kw = ctp_node(p, E_KW, ctp_cur(p)->line);
            if (!kw || !(kw->str = ctp_dup(p, ctp_cur(p)->s, kw->line))) {
                ct_node_free(kw);
                return -1;
            }
            ctp_next(p);
            ctp_next(p);
            if (!(kw->a = ctp_expr(p, 1)) || ctp_push(p, &n->args, ctp_seal(p, kw))) {
                if (!kw->a) ct_node_free(kw);
                return -1;
            }
        } else if (ctp_push(p, &n->args, ctp_expr(p, 1))) {
            return -1;
        }
    }
    ctp_next(p);
    return 0;
}

/* A dotted name after | or is: "upper", "tojson". */
static char *parse_dotted(ct_parser *p)
{
    if (ctp_cur(p)->kind != TK_NAME) {
        ctp_unexpected(p, "a name");
        return NULL;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ctp_cur(p)->s);
    ctp_next(p);
    while (ctp_is_op(p, OP_DOT) && ctp_peek(p, 1)->kind == TK_NAME) {
        size_t l = strlen(buf);
        snprintf(buf + l, sizeof buf - l, ".%s", ctp_peek(p, 1)->s);
        ctp_next(p);
        ctp_next(p);
    }
    return ctp_dup(p, buf, ctp_cur(p)->line);
}

static void unknown(ct_parser *p, ct_node *n, const char *what, int line)
{
    n->deferred = 1;
    if (!p->conds && !p->pending_line) {
        snprintf(p->pending, sizeof p->pending, "no %s named '%.60s'", what, n->str);
        p->pending_line = line;
    }
}

/* At the end of a statement: an unknown filter or test outside a soft frame fails. */
int ctp_settle(ct_parser *p)
{
    if (!p->pending_line) return 0;
    return ctp_fail(p, p->pending_line, "%s", p->pending);
}

ct_node *ctp_filter(ct_parser *p, ct_node *operand)
{
    int line = ctp_cur(p)->line;
    ct_node *f = ctp_node(p, E_FILTER, line);
    if (!f) {
        ct_node_free(operand);
        return NULL;
    }
    f->a = operand;
    if (!(f->str = parse_dotted(p))) goto fail;
    if (!ct_filter_known(f->str)) unknown(p, f, "filter", line);
    if (ctp_is_op(p, OP_LPAREN) && parse_call_args(p, f)) goto fail;
    return ctp_seal(p, f);
fail:
    ct_node_free(f);
    return NULL;
}

static ct_node *parse_test(ct_parser *p, ct_node *operand)
{
    int line = ctp_cur(p)->line;
    ct_node *t = ctp_node(p, E_TEST, line);
    if (!t) {
        ct_node_free(operand);
        return NULL;
    }
    t->a = operand;
    if (ctp_at_name(p, "not")) {
        t->op = 1;
        ctp_next(p);
    }
    if (!(t->str = parse_dotted(p))) goto fail;
    if (!ct_test_known(t->str)) unknown(p, t, "test", line);
    const ct_tok *c = ctp_cur(p);
    if (ctp_is_op(p, OP_LPAREN)) {
        if (parse_call_args(p, t)) goto fail;
    } else if ((c->kind == TK_NAME || c->kind == TK_STRING || c->kind == TK_INT || c->kind == TK_FLOAT ||
                ctp_is_op(p, OP_LBRACKET) || ctp_is_op(p, OP_LBRACE)) &&
               !ctp_is_name(c, "else") && !ctp_is_name(c, "or") && !ctp_is_name(c, "and")) {
        /* "x is sameas y", "x is divisibleby 3": one argument without parentheses */
        if (ctp_is_name(c, "is")) {
            ctp_fail(p, c->line, "you cannot chain multiple tests with is");
            goto fail;
        }
        if (ctp_enter(p)) goto fail;
        ct_node *arg = parse_primary(p);
        if (arg) arg = parse_postfix(p, arg);
        p->depth--;
        if (ctp_push(p, &t->args, arg)) goto fail;
    }
    return ctp_seal(p, t);
fail:
    ct_node_free(t);
    return NULL;
}

/* x.name, x.0, x[key], x[a:b:c], x(args) */
static ct_node *parse_postfix(ct_parser *p, ct_node *n)
{
    while (n) {
        int line = ctp_cur(p)->line;
        if (ctp_accept(p, OP_DOT)) {
            const ct_tok *t = ctp_cur(p);
            if (t->kind == TK_NAME) {
                ct_node *a = ctp_mk(p, E_ATTR, line, n, NULL);
                if (a && !(a->str = ctp_dup(p, t->s, line))) ct_node_free(a), a = NULL;
                n = a;
                ctp_next(p);
            } else if (t->kind == TK_INT) {
                n = ctp_mk(p, E_ITEM, line, n, ctp_literal(p, line, json_integer(t->i)));
                ctp_next(p);
            } else {
                ct_node_free(n);
                ctp_unexpected(p, "an attribute name");
                return NULL;
            }
        } else if (ctp_accept(p, OP_LBRACKET)) {
            ct_node *parts[3] = {NULL, NULL, NULL};
            int slice = 0, k = 0, bad = ctp_enter(p);
            /* [key] or [start:stop:step], each part optional in a slice */
            while (!bad) {
                if (!ctp_is_op(p, OP_COLON) && !ctp_is_op(p, OP_RBRACKET)) bad = !(parts[k] = ctp_expr(p, 1));
                if (bad || !ctp_is_op(p, OP_COLON) || k == 2) break;
                ctp_next(p);
                slice = 1;
                k++;
            }
            p->depth--;
            if (!bad && !slice && !parts[0]) bad = ctp_unexpected(p, "a subscript");
            if (bad || ctp_expect(p, OP_RBRACKET)) {
                for (k = 0; k < 3; k++) ct_node_free(parts[k]);
                ct_node_free(n);
                return NULL;
            }
            if (slice) {
                ct_node *s = ctp_node(p, E_SLICE, line);
                if (!s) {
                    for (k = 0; k < 3; k++) ct_node_free(parts[k]);
                    ct_node_free(n);
                    return NULL;
                }
                s->a = n, s->b = parts[0], s->c = parts[1], s->d = parts[2];
                n = ctp_seal(p, s);
            } else {
                n = ctp_mk(p, E_ITEM, line, n, parts[0]);
            }
        } else if (ctp_is_op(p, OP_LPAREN)) {
            ct_node *call = ctp_mk(p, E_CALL, line, n, NULL);
            if (call && parse_call_args(p, call)) ct_node_free(call), call = NULL;
            n = ctp_seal(p, call);
        } else {
            break;
        }
    }
    return n;
}

static ct_node *parse_filter_expr(ct_parser *p, ct_node *n)
{
    while (n) {
        if (ctp_accept(p, OP_PIPE)) {
            n = ctp_filter(p, n);
        } else if (ctp_at_name(p, "is")) {
            ctp_next(p);
            n = parse_test(p, n);
        } else if (ctp_is_op(p, OP_LPAREN)) {
            ct_node *call = ctp_mk(p, E_CALL, ctp_cur(p)->line, n, NULL);
            if (call && parse_call_args(p, call)) ct_node_free(call), call = NULL;
            n = ctp_seal(p, call);
        } else {
            break;
        }
    }
    return n;
}

static ct_node *parse_list_like(ct_parser *p, int kind, int close)
{
    ct_node *n = ctp_node(p, kind, ctp_cur(p)->line);
    if (!n) return NULL;
    ctp_next(p);
    while (!ctp_is_op(p, close)) {
        if (n->args.n && ctp_expect(p, OP_COMMA)) goto fail;
        if (ctp_is_op(p, close)) break;
        if (ctp_push(p, &n->args, ctp_expr(p, 1))) goto fail;
        if (kind == E_DICT && (ctp_expect(p, OP_COLON) || ctp_push(p, &n->args, ctp_expr(p, 1)))) goto fail;
    }
    ctp_next(p);
    return ctp_seal(p, n);
fail:
    ct_node_free(n);
    return NULL;
}

static ct_node *parse_primary(ct_parser *p)
{
    ct_tok *t = ctp_cur(p);
    int line = t->line;
    switch (t->kind) {
    case TK_NAME: {
        static const struct {
            const char *s;
            int v;
        } consts[] = {{"true", 1}, {"True", 1}, {"false", 0}, {"False", 0}, {"none", 2}, {"None", 2}};
        for (size_t k = 0; k < sizeof consts / sizeof consts[0]; k++)
            if (!strcmp(t->s, consts[k].s)) {
                ctp_next(p);
                return ctp_literal(p, line, consts[k].v == 2 ? json_null() : json_boolean(consts[k].v));
            }
        ct_node *n = ctp_node(p, E_NAME, line);
        if (n && !(n->str = ctp_dup(p, t->s, line))) ct_node_free(n), n = NULL;
        ctp_next(p);
        return n;
    }
    case TK_STRING: {
        /* adjacent strings join, as in Python: 'a' "b" */
        ct_buf b = {0};
        ct_ctx dummy = {.e = p->e, .line = line};
        while (ctp_cur(p)->kind == TK_STRING) {
            if (ct_buf_put(&dummy, &b, ctp_cur(p)->s, ctp_cur(p)->len)) {
                free(b.p);
                return NULL;
            }
            ctp_next(p);
        }
        ct_node *n = ctp_literal(p, line, json_stringn_nocheck(b.p ? b.p : "", b.n));
        free(b.p);
        return n;
    }
    case TK_INT: ctp_next(p); return ctp_literal(p, line, json_integer(t->i));
    case TK_FLOAT: ctp_next(p); return ctp_literal(p, line, json_real(t->d));
    case TK_OP:
        if (t->op == OP_LPAREN) {
            ctp_next(p);
            ct_node *n = ctp_tuple(p, 1, 1);
            if (n && ctp_expect(p, OP_RPAREN)) ct_node_free(n), n = NULL;
            return n;
        }
        if (t->op == OP_LBRACKET) return parse_list_like(p, E_LIST, OP_RBRACKET);
        if (t->op == OP_LBRACE) return parse_list_like(p, E_DICT, OP_RBRACE);
        break;
    default: break;
    }
    ctp_unexpected(p, NULL);
    return NULL;
}

static ct_node *parse_unary(ct_parser *p, int with_filter)
{
    int line = ctp_cur(p)->line, kind = ctp_is_op(p, OP_SUB) ? E_NEG : ctp_is_op(p, OP_ADD) ? E_POS : 0;
    ct_node *n;
    if (kind) {
        /* - - - x recurses: it counts as nesting */
        ctp_next(p);
        if (ctp_enter(p)) return NULL;
        ct_node *operand = parse_unary(p, 0);
        p->depth--;
        n = operand ? ctp_mk(p, kind, line, operand, NULL) : NULL;
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    return n;
}

/* One left-associative level: l (op r)*. */
static ct_node *binary(ct_parser *p, ct_node *(*sub)(ct_parser *), const int *ops, int kind)
{
    ct_node *l = sub(p);
    while (l) {
        int op = 0;
        for (const int *o = ops; *o; o++)
            if (ctp_is_op(p, *o)) op = *o;
        if (!op) break;
        int line = ctp_cur(p)->line;
        ctp_next(p);
        ct_node *r = sub(p);
        if (!r) {
            ct_node_free(l);
            return NULL;
        }
        l = ctp_mk(p, kind, line, l, r);
        if (l) l->op = (uint8_t)op;
    }
    return l;
}

static ct_node *parse_unary_f(ct_parser *p) { return parse_unary(p, 1); }
static ct_node *parse_pow(ct_parser *p) { return binary(p, parse_unary_f, (const int[]){OP_POW, 0}, E_BIN); }
static ct_node *parse_math2(ct_parser *p)
{
    return binary(p, parse_pow, (const int[]){OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, 0}, E_BIN);
}
static ct_node *parse_concat(ct_parser *p) { return binary(p, parse_math2, (const int[]){OP_TILDE, 0}, E_BIN); }
static ct_node *parse_math1(ct_parser *p) { return binary(p, parse_concat, (const int[]){OP_ADD, OP_SUB, 0}, E_BIN); }

static ct_node *parse_compare(ct_parser *p)
{
    int line = ctp_cur(p)->line;
    ct_node *first = parse_math1(p);
    if (!first) return NULL;
    ct_node *cmp = NULL;
    for (;;) {
        int op = 0;
        static const int rel[] = {OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE};
        for (size_t k = 0; k < sizeof rel / sizeof rel[0]; k++)
            if (ctp_is_op(p, rel[k])) op = rel[k];
        if (op)
            ctp_next(p);
        else if (ctp_at_name(p, "in"))
            op = OP_IN, ctp_next(p);
        else if (ctp_at_name(p, "not") && ctp_is_name(ctp_peek(p, 1), "in"))
            op = OP_NOTIN, ctp_next(p), ctp_next(p);
        else
            break;
        if (!cmp) {
            if (!(cmp = ctp_node(p, E_CMP, line)) || ctp_push(p, &cmp->args, first)) {
                if (!cmp) ct_node_free(first);
                ct_node_free(cmp);
                return NULL;
            }
        }
        uint8_t *ops = realloc(cmp->ops, cmp->args.n);
        if (!ops) {
            ct_node_free(cmp);
            ctp_fail(p, line, "out of memory");
            return NULL;
        }
        cmp->ops = ops;
        ops[cmp->args.n - 1] = (uint8_t)op;
        if (ctp_push(p, &cmp->args, parse_math1(p))) {
            ct_node_free(cmp);
            return NULL;
        }
    }
    return cmp ? ctp_seal(p, cmp) : first;
}

static ct_node *parse_not(ct_parser *p)
{
    if (ctp_at_name(p, "not")) {
        int line = ctp_cur(p)->line;
        ctp_next(p);
        if (ctp_enter(p)) return NULL;
        ct_node *n = parse_not(p);
        p->depth--;
        return n ? ctp_mk(p, E_NOT, line, n, NULL) : NULL;
    }
    return parse_compare(p);
}

static ct_node *logical(ct_parser *p, ct_node *(*sub)(ct_parser *), const char *word, int kind)
{
    ct_node *l = sub(p);
    while (l && ctp_at_name(p, word)) {
        int line = ctp_cur(p)->line;
        ctp_next(p);
        ct_node *r = sub(p);
        if (!r) {
            ct_node_free(l);
            return NULL;
        }
        l = ctp_mk(p, kind, line, l, r);
    }
    return l;
}

static ct_node *parse_and(ct_parser *p) { return logical(p, parse_not, "and", E_AND); }
static ct_node *parse_or(ct_parser *p) { return logical(p, parse_and, "or", E_OR); }

ct_node *ctp_expr(ct_parser *p, int condexpr)
{
    if (ctp_enter(p)) return NULL;
    int pending = p->pending_line;
    ct_node *n = parse_or(p);
    /* the first operand of a conditional is soft too */
    if (condexpr && n && ctp_at_name(p, "if")) p->pending_line = pending;
    while (condexpr && n && ctp_at_name(p, "if")) {
        /* a if test else b; without else the value is undefined */
        ct_node *c = ctp_node(p, E_COND, ctp_cur(p)->line);
        if (!c) {
            ct_node_free(n);
            n = NULL;
            break;
        }
        ctp_next(p);
        c->b = n;
        p->conds++;
        c->a = parse_or(p);
        if (c->a && ctp_at_name(p, "else")) {
            ctp_next(p);
            c->c = ctp_expr(p, 1);
            if (!c->c) c->a = (ct_node_free(c->a), NULL);
        }
        p->conds--;
        n = c->a ? ctp_seal(p, c) : (ct_node_free(c), NULL);
    }
    p->depth--;
    return n;
}
