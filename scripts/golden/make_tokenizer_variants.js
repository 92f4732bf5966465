#!/usr/bin/env node
// Golden data for tokenizer options that the shipped models do not use
// (Split behaviours, Qwen2 / Llama-3 pre-tokenizers, Metaspace, added-token
// flags, unk, normalizers, the Unicode normalization forms). Each variant is a
// shipped tokenizer.json plus a list of patches; the reference is the Hugging
// Face tokenizers library through its Node binding (npm `tokenizers`, same
// Rust core as the Python one).
//
//   npm install tokenizers@0.23.2
//   node scripts/golden/make_tokenizer_variants.js SHARED_DATA_DIR OUT.json
//
// OUT.json: {"library", "variants": {name: {"base", "patches": [[op, pointer, value]]}},
//            "cases": [{"variant", "text" (null: decode only), "ids", "ids_special",
//                       "decoded", "decoded_skip"}]}
// ops: "set" (RFC 6901 pointer; "/-" appends to an array), "merges_to_strings".
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {Tokenizer} = require('tokenizers');

const [dataDir, outPath] = process.argv.slice(2);
if (!dataDir || !outPath) {
  console.error('usage: make_tokenizer_variants.js SHARED_DATA_DIR OUT.json');
  process.exit(2);
}
const BL = 'tiny-llama-6m';
const SP = 'stories260K';
const qwenRe = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const l3Re = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const added = (id, content, o = {}) => Object.assign(
    {id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true}, o);
const splitThenBytes = (split, useRegex) => ({
  type: 'Sequence',
  pretokenizers: [split, {type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: useRegex}],
});

const variants = {};
variants.qwen2 = {base: BL, patches: [['set', '/pre_tokenizer',
  splitThenBytes({type: 'Split', pattern: {Regex: qwenRe}, behavior: 'Isolated', invert: false}, false)]]};
variants.llama3 = {base: BL, patches: [
  ['set', '/pre_tokenizer',
   splitThenBytes({type: 'Split', pattern: {Regex: l3Re}, behavior: 'Isolated', invert: false}, false)],
  ['set', '/model/ignore_merges', true],
  ['set', '/post_processor', {type: 'Sequence', processors: [
    {type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true},
    {type: 'TemplateProcessing',
     single: [{SpecialToken: {id: '<|endoftext|>', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}}],
     pair: [], special_tokens: {'<|endoftext|>': {id: '<|endoftext|>', ids: [0], tokens: ['<|endoftext|>']}}}]}],
]};
variants.added_flags = {base: BL, patches: [
  ['merges_to_strings', '/model/merges', null],
  ['set', '/pre_tokenizer/add_prefix_space', true],
  ['set', '/added_tokens/-', added(4096, '<mask>', {lstrip: true, rstrip: true})],
  ['set', '/added_tokens/-', added(4097, '<sw>', {single_word: true, special: false})],
  ['set', '/added_tokens/-', added(4098, 'hello', {normalized: true, special: false})],
  ['set', '/added_tokens/-', added(4099, '<|a|><|b|>')],
  ['set', '/added_tokens/-', added(4100, '<|a|>')],
  ['set', '/added_tokens/-', added(4101, '<|b|>', {lstrip: true})],
  ['set', '/added_tokens/-', added(4102, 'ZZ', {rstrip: true, special: false})],
  ['set', '/added_tokens/-', added(4103, 'wörld', {normalized: true})],
  ['set', '/added_tokens/-', added(4104, 'späce', {special: false})],
]};
for (const behavior of ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous']) {
  for (const invert of [false, true]) {
    variants[`split_${behavior}_${invert ? 'inv' : 'fwd'}`] = {base: BL, patches: [['set', '/pre_tokenizer',
      splitThenBytes({type: 'Split', pattern: {Regex: String.raw`\s+|[,.!?]`}, behavior, invert}, true)]]};
  }
}
variants.split_string_normalizers = {base: BL, patches: [
  ['set', '/pre_tokenizer',
   splitThenBytes({type: 'Split', pattern: {String: 'e'}, behavior: 'MergedWithNext', invert: false}, false)],
  ['set', '/normalizer', {type: 'Sequence', normalizers: [
    {type: 'Strip', strip_left: true, strip_right: true},
    {type: 'Replace', pattern: {Regex: '[0-9]+'}, content: '#'}]}],
]};
for (const scheme of ['always', 'first', 'never']) {
  for (const split of [true, false]) {
    variants[`metaspace_${scheme}_${split ? 'split' : 'whole'}`] = {base: SP, patches: [
      ['set', '/normalizer', null],
      ['set', '/pre_tokenizer', {type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split}],
      ['set', '/decoder', {type: 'Sequence', decoders: [
        {type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split},
        {type: 'ByteFallback'}, {type: 'Fuse'}]}],
    ]};
  }
}
variants.sp_unk_fused = {base: SP, patches: [['set', '/model/byte_fallback', false]]};
variants.sp_unk_separate = {base: SP, patches: [
  ['set', '/model/byte_fallback', false], ['set', '/model/fuse_unk', false]]};
variants.sp_added = {base: SP, patches: [
  ['set', '/added_tokens/-', added(512, 'Once', {normalized: true, special: false})],
  ['set', '/added_tokens/-', added(513, '<|endoftext|>', {lstrip: true})],
  ['set', '/added_tokens/-', added(514, 'Lily', {normalized: true})],
  ['set', '/added_tokens/-', added(515, 'park')],
]};

// Unicode normalizers (last, so that the variants above keep their texts).
const unicodeTexts = ['ＡＢＣ ｄｅｆ １２３！？', 'ｈｅｌｌｏ，ｗｏｒｌｄ', 'ｶﾀｶﾅ ｶﾞｷﾞ ﾊﾟ', '\u3000全角\u3000スペース',
  'ﬁle ﬂow ﬀ ﬃ ﬄ ﬅ ﬆ', 'Ǆ ǅ ǆ Ĳ ĳ ŉ', 'e\u0301 é a\u0308 ä A\u030a Å', 'a\u0323\u0302 a\u0302\u0323 ậ',
  'Tie\u0302\u0301ng Vie\u0323\u0302t / Tiếng Việt', '\u212b \u2126 \u212a \u1f71 \u037e \u0387',
  '\u0958 \u0915\u093c', '\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af 각 한글',
  '① ② ⑩ ㎏ ㎞ x² H₂O ½', '™ … ſ \u00a0NBSP\u2002EN Ⅳ ㍿ ℌ ℃', '\u{1d400}\u{1d41b}\u{1d7ce} \u24b6',
  'ά α\u0301 ΐ ι\u0308\u0301 Ἀθῆναι', 'й и\u0306 ё е\u0308 Ѐ Е\u0300 ї і\u0308',
  'a ﬁsh, a fish, ﬁ and fi', ' ﬁsh\u00a0ﬁ\u3000ﬁsh '];
for (const form of ['NFC', 'NFD', 'NFKC', 'NFKD']) {
  variants[form.toLowerCase()] = {base: BL, patches: [['set', '/normalizer', {type: form}]]};
}
variants.nfkc_added = {base: BL, patches: [
  ['set', '/normalizer', {type: 'Sequence', normalizers: [{type: 'NFKC'}, {type: 'Strip', strip_left: true, strip_right: false}]}],
  ['set', '/added_tokens/-', added(4096, 'ﬁsh', {normalized: true, special: false})],
  ['set', '/added_tokens/-', added(4097, 'ﬁ', {normalized: false, special: false})],
]};
variants.sp_nfkc = {base: SP, patches: [['set', '/normalizer', {type: 'Sequence', normalizers: [
  {type: 'NFKC'}, {type: 'Prepend', prepend: '\u2581'}, {type: 'Replace', pattern: {String: ' '}, content: '\u2581'}]}]]};
variants.sp_nfd = {base: SP, patches: [['set', '/normalizer/normalizers/-', {type: 'NFD'}]]};
const unicodeVariants = new Set(['nfc', 'nfd', 'nfkc', 'nfkd', 'nfkc_added', 'sp_nfkc', 'sp_nfd']);

function applyPatches(base, patches) {
  const t = JSON.parse(JSON.stringify(base));
  for (const [op, pointer, value] of patches) {
    const keys = pointer.split('/').slice(1);
    const last = keys.pop();
    let node = t;
    for (const k of keys) node = node[k];
    if (op === 'merges_to_strings') {
      node[last] = node[last].map((m) => (Array.isArray(m) ? m.join(' ') : m));
    } else if (last === '-') {
      node.push(value);
    } else {
      node[last] = value;
    }
  }
  return t;
}

// Deterministic random strings from fragments that stress the pipeline.
let seed = 20261130;
const rnd = (n) => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
};
const frags = ['a', 'b', 'the', 'The', ' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n', "'s", "'S",
  "'ll", "'re", '123', '4567', '12345678', '½', '²', 'é', 'e\u0301', '日本', '🙂', '👍🏽', '\u00a0',
  '\u2000', '\u3000', '\u180e', '\u200b', '<|endoftext|>', '<s>', '</s>', '<unk>', '▁', '▁▁',
  '<0x0A>', 'Ġ', '!', '...', '—', '“', '$', '_', '-', 'ß', 'İ', 'ﬁ', '\u200d', '\u0000', '\u007f',
  '\u0085', 'hello', 'Once', 'upon', '<mask>', '<sw>', ' <sw> ', '<|a|>', '<|b|>', '<|a|><|b|>',
  'ZZ', 'ZZ  ', 'Lily', 'park', ' Lily', 'wörld', 'späce', ',', '.', '?', 'e', '  e ', 'Привет',
  'مرحبا', 'ไทย', '한국어'];
const ranges = [[0x0, 0x20], [0x300, 0x36f], [0x660, 0x669], [0x1800, 0x18af], [0xff00, 0xffef],
  [0x20, 0x7e], [0xa0, 0x2ff], [0x400, 0x4ff], [0x4e00, 0x9fff], [0x1f300, 0x1f6ff], [0x2000, 0x206f]];
function randomText() {
  const n = rnd(16);
  let s = '';
  for (let i = 0; i < n; i++) {
    if (rnd(4) === 0) {
      const r = ranges[rnd(ranges.length)];
      s += String.fromCodePoint(r[0] + rnd(r[1] - r[0] + 1));
    } else {
      s += frags[rnd(frags.length)];
    }
  }
  return s;
}

(async () => {
  const bases = {};
  for (const m of [BL, SP]) {
    bases[m] = JSON.parse(fs.readFileSync(path.join(dataDir, 'models', m, 'tokenizer.json'), 'utf8'));
  }
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tokvar-'));
  const cases = [];
  for (const [name, v] of Object.entries(variants)) {
    const file = path.join(tmp, `${name}.json`);
    fs.writeFileSync(file, JSON.stringify(applyPatches(bases[v.base], v.patches)));
    const tok = Tokenizer.fromFile(file);
    const texts = ['', ' ', '\n'];
    while (texts.length < 40) texts.push(randomText());
    if (unicodeVariants.has(name)) texts.push(...unicodeTexts);
    for (const text of texts) {
      const ids = Array.from((await tok.encode(text, null, {addSpecialTokens: false})).getIds());
      const idsSpecial = Array.from((await tok.encode(text, null, {addSpecialTokens: true})).getIds());
      cases.push({variant: name, text, ids, ids_special: idsSpecial,
        decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true)});
    }
    const vocab = tok.getVocabSize(true);
    for (let k = 0; k < 8; k++) {
      const ids = [];
      for (let i = rnd(12); i > 0; i--) ids.push(rnd(10) < 3 ? rnd(Math.min(vocab, 300)) : rnd(vocab + 3));
      cases.push({variant: name, text: null, ids, ids_special: null,
        decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true)});
    }
  }
  fs.rmSync(tmp, {recursive: true, force: true});
  const lib = JSON.parse(fs.readFileSync(require.resolve('tokenizers/package.json'), 'utf8')).version;
  fs.writeFileSync(outPath, JSON.stringify({library: `tokenizers ${lib} (npm)`, variants, cases}));
  console.log(`${Object.keys(variants).length} variants, ${cases.length} cases -> ${outPath}`);
})();
