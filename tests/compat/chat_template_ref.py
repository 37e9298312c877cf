#!/usr/bin/env python3
"""chat_template_ref.py — the Python reference for tests/test_chat_template.c:
Jinja2 configured as transformers' apply_chat_template does it
(transformers/utils/chat_template_utils.py, _compile_jinja_template): an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop controls
and the {% generation %} tag; tojson as json.dumps(ensure_ascii=False);
the globals raise_exception and strftime_now.

Usage: chat_template_ref.py INPUT.json
  INPUT: {"template": str, "cases": [vars...]}
Writes a JSON list with, for each case, the rendered string or
{"error": message} (a syntax error gives an error for every case).
INPUT may also be {"jobs": [{"template": ..., "cases": [...]}, ...]}, which
writes one such list per job (one process for many small templates).
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: the body renders as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def render_job(env, job):
    try:
        template = env.from_string(job["template"])
    except Exception as e:  # a syntax error fails every case
        return [{"error": "%s: %s" % (type(e).__name__, e)} for _ in job["cases"]]
    out = []
    for case in job["cases"]:
        try:
            out.append(template.render(**case))
        except Exception as e:
            out.append({"error": "%s: %s" % (type(e).__name__, e)})
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    if "jobs" in job:
        out = [render_job(env, j) for j in job["jobs"]]
    else:
        out = render_job(env, job)
    sys.stdout.write(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
