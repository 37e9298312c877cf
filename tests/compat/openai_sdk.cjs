// openai_sdk.cjs — the official OpenAI Node SDK against `rehearse serve`:
// models, completions, chat, streaming with usage, stop, seed, logprobs, n
// and errors, each checked against a second request or a known answer.
// Run by tests/test_compat.c: node openai_sdk.cjs SDK_DIR BASE_URL MODEL.
// Prints one line per failed check and "openai-sdk: N checks passed" at
// the end; exits 1 on any failure.
'use strict';

const [sdkDir, baseURL, model] = process.argv.slice(2);
const OpenAI = require(sdkDir + '/openai');
const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'unused', maxRetries: 0 });

let passed = 0, failed = 0;
function check(what, ok, detail) {
  if (ok) passed++;
  else {
    failed++;
    console.log('FAIL ' + what + (detail === undefined ? '' : ': ' + JSON.stringify(detail)));
  }
}

async function expectError(what, fn, status, param) {
  try {
    await fn();
    check(what + ' is refused', false, 'it succeeded');
  } catch (e) {
    check(what + ' gives HTTP ' + status, e instanceof OpenAI.APIError && e.status === status, e.status);
    if (param) check(what + ' names ' + param, e.param === param, e.param);
  }
}

async function main() {
  // models
  const list = await client.models.list();
  check('models.list holds the served model', list.data.length === 1 && list.data[0].id === model, list.data);
  const one = await client.models.retrieve(model);
  check('models.retrieve', one.id === model && one.object === 'model', one);
  await expectError('models.retrieve of another model', () => client.models.retrieve('gpt-4'), 404);

  // completions: whole and streamed agree (greedy)
  const base = { model, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, ignore_eos: true };
  const whole = await client.completions.create(base);
  check('completion usage', whole.usage.completion_tokens === 6 && whole.usage.prompt_tokens > 0, whole.usage);
  check('completion finish', whole.choices[0].finish_reason === 'length', whole.choices[0]);
  let text = '', usage = null, chunks = 0;
  const stream = await client.completions.create({ ...base, stream: true, stream_options: { include_usage: true } });
  for await (const c of stream) {
    chunks++;
    if (c.choices.length) text += c.choices[0].text;
    if (c.usage) usage = c.usage;
  }
  check('streamed text equals the whole', text === whole.choices[0].text, [text, whole.choices[0].text]);
  check('streamed usage comes last', usage && usage.completion_tokens === 6, usage);
  check('several chunks', chunks >= 2, chunks);

  // chat: the role, seed reproducibility, streaming deltas
  const messages = [{ role: 'user', content: 'Say something.' }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, ignore_eos: true });
  check('chat message role', chat.choices[0].message.role === 'assistant', chat.choices[0].message);
  check('chat object', chat.object === 'chat.completion', chat.object);
  let delta = '', role = null;
  const cs = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, ignore_eos: true,
                                                    stream: true, stream_options: { include_usage: true } });
  for await (const c of cs) {
    if (!c.choices.length) continue;
    if (c.choices[0].delta.role) role = c.choices[0].delta.role;
    delta += c.choices[0].delta.content || '';
  }
  check('chat stream role', role === 'assistant', role);
  check('chat stream equals the whole', delta === chat.choices[0].message.content, [delta, chat.choices[0].message.content]);
  const sampled = { model, messages, max_tokens: 8, temperature: 1, seed: 11, ignore_eos: true };
  const s1 = await client.chat.completions.create(sampled);
  const s2 = await client.chat.completions.create(sampled);
  check('a seed repeats the sample', s1.choices[0].message.content === s2.choices[0].message.content);

  // stop: 'A' pushed to the top, "A" a stop string: nothing before it
  const stopped = await client.completions.create({ model, prompt: 'x', max_tokens: 8, temperature: 0, stop: ['A'],
                                                    logit_bias: { '65': 100 } });
  check('stop string', stopped.choices[0].text === '' && stopped.choices[0].finish_reason === 'stop', stopped.choices[0]);

  // logprobs
  const lp = await client.completions.create({ ...base, logprobs: 2 });
  const l = lp.choices[0].logprobs;
  check('completion logprobs', l && l.tokens.length === 6 && l.token_logprobs.length === 6 &&
        l.token_logprobs.every((x) => x <= 0) && l.text_offset.length === 6, l);
  const clp = await client.chat.completions.create({ model, messages, max_tokens: 3, temperature: 0, logprobs: true,
                                                     top_logprobs: 2, ignore_eos: true });
  const content = clp.choices[0].logprobs && clp.choices[0].logprobs.content;
  check('chat logprobs', content && content.length === 3 && content.every((e) => e.top_logprobs.length === 2 &&
        e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob && e.logprob === e.top_logprobs[0].logprob), content);

  // n
  const many = await client.completions.create({ model, prompt: 'Hi', max_tokens: 4, n: 3, temperature: 1, seed: 2,
                                                 ignore_eos: true });
  check('n choices', many.choices.length === 3 && many.choices.every((c, i) => c.index === i), many.choices);
  const single = await client.completions.create({ model, prompt: 'Hi', max_tokens: 4, temperature: 1, seed: 2,
                                                   ignore_eos: true });
  check('n counts the prompt once', many.usage.completion_tokens === 12 &&
        many.usage.prompt_tokens === single.usage.prompt_tokens, [many.usage, single.usage]);
  check('choice 0 of n is the n = 1 answer', many.choices[0].text === single.choices[0].text);

  // errors, as the SDK raises them
  await expectError('a negative temperature', () => client.completions.create({ ...base, temperature: -1 }), 400,
                    'temperature');
  await expectError('tools', () => client.chat.completions.create({ model, messages, tools: [{ type: 'function',
                    function: { name: 'f', parameters: {} } }] }), 400, 'tools');
  await expectError('another model', () => client.completions.create({ ...base, model: 'gpt-4' }), 404);
  await expectError('a prompt past the context', () => client.completions.create({ ...base, prompt: 'x'.repeat(5000) }),
                    400);

  console.log('openai-sdk: ' + passed + ' checks passed, ' + failed + ' failed');
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.log('FAIL the script stopped: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
